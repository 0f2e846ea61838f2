//! The session tools a home runs for its threads, in their workspaces (the product's
//! built-in tools). So far the file tools, as functions over a thread's workspace:
//! [`files`] (`Read`, `Write`, `Edit`) and [`search`] (`Glob`, `Grep`). The registry that serves
//! them over gRPC and `kiki mcp`, their approval rules and their record in a thread's
//! history come next (issue 43).

pub mod files;
pub mod search;
