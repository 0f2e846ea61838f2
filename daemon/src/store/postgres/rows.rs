//! Rows: words bound as their one spelling in a TEXT column, and a Postgres row read by the
//! record mappers of `store/columns.rs` (the schemas match the SQLite store's column for
//! column).

use sqlx::postgres::{PgArgumentBuffer, PgRow, PgTypeInfo};
use sqlx::{Decode, Encode, Row, Type, encode::IsNull, error::BoxDynError};

use super::*;

pub(super) use crate::store::columns::*;

/// Each word type bound as its one spelling in a TEXT column (read back through [`Columns`]).
macro_rules! word_columns {
    ($($word:ty),*) => {$(
        impl Type<Postgres> for $word {
            fn type_info() -> PgTypeInfo {
                <&str as Type<Postgres>>::type_info()
            }

            fn compatible(ty: &PgTypeInfo) -> bool {
                <&str as Type<Postgres>>::compatible(ty)
            }
        }

        impl Encode<'_, Postgres> for $word {
            fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
                <&str as Encode<Postgres>>::encode(self.as_str(), buf)
            }
        }

    )*};
}

row_words!(word_columns);

/// A permission set as its comma-separated words (`read,send`).
impl Type<Postgres> for Permissions {
    fn type_info() -> PgTypeInfo {
        <&str as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <&str as Type<Postgres>>::compatible(ty)
    }
}

impl Encode<'_, Postgres> for Permissions {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <String as Encode<Postgres>>::encode(self.joined(), buf)
    }
}

/// A row read by the record mappers (`store/columns.rs`), by the column's Postgres type.
impl Columns for PgRow {
    fn cell(&self, name: &str) -> StoreResult<Cell<'_>> {
        use sqlx::{TypeInfo, ValueRef};
        let value = self.try_get_raw(name)?;
        if value.is_null() {
            return Ok(Cell::Null);
        }
        let unreadable = |e: BoxDynError| StoreError::Backend(format!("column {name}: {e}"));
        Ok(match value.type_info().name() {
            "INT8" => Cell::Int(<i64 as Decode<Postgres>>::decode(value).map_err(unreadable)?),
            "INT4" => Cell::Int(<i32 as Decode<Postgres>>::decode(value).map_err(unreadable)?.into()),
            "BOOL" => Cell::Bool(<bool as Decode<Postgres>>::decode(value).map_err(unreadable)?),
            "FLOAT8" => Cell::Real(<f64 as Decode<Postgres>>::decode(value).map_err(unreadable)?),
            "TEXT" | "VARCHAR" => Cell::Text(<&str as Decode<Postgres>>::decode(value).map_err(unreadable)?),
            other => {
                return Err(StoreError::Backend(format!("column {name}: a {other}, not a value kiki keeps")));
            }
        })
    }
}
