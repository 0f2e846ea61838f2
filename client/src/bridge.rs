//! `kiki bridge …`: pair with other homes, grant and revoke their access, and see what went
//! over each bridge.

use std::path::Path;

use anyhow::Result;
use clap::Subcommand;
use kiki_client::BridgeClient;
use kiki_proto as pb;
use kiki_proto::Word;

use crate::args::absolute_if_dir;
use crate::connect::connect;
use crate::output::print_json;
use crate::render::{granted, permissions, scope};

#[derive(Subcommand)]
pub enum BridgeCommand {
    /// Ask the home at ADDRESS (host:port of its QUIC endpoint) for a bridge.
    Request {
        /// The target's QUIC endpoint, host:port (`kiki status` there shows it); a team
        /// home's replicas as several, separated by commas, tried in turn.
        address: String,
        /// Permissions wanted: read,send,wake,wait.
        #[arg(long, required = true)]
        want: Vec<String>,
        /// Refuse the target unless its home id is this (the 52 characters `kiki status`
        /// prints there; either case).
        #[arg(long)]
        expect: Option<String>,
        /// Local name for the target, usable as HOST in references.
        #[arg(long)]
        name: Option<String>,
    },
    /// Pairing requests other homes filed with this one.
    Pending,
    /// Grant a request (possibly fewer permissions, possibly limited to workspaces).
    Approve {
        /// The request's id (`kiki bridge pending`).
        request: String,
        /// Permissions granted: read,send,wake,wait — at most what was asked for.
        #[arg(long, required = true)]
        allow: Vec<String>,
        /// A workspace the grant is limited to: its id (ws_…) or a directory in it.
        #[arg(long = "workspace")]
        workspaces: Vec<String>,
        /// This home's name for the calling home, usable as HOST (default: the name it gave).
        #[arg(long)]
        name: Option<String>,
    },
    /// Give a bridge (either direction) another local name, usable as HOST from then on.
    Rename {
        /// The bridge: its id, alias or peer home id.
        bridge: String,
        /// The new name: one word, not shaped like a home or bridge id.
        name: String,
    },
    /// Reject a pending pairing request (target side): the source sees `rejected`.
    Reject {
        /// The request's id (`kiki bridge pending`).
        request: String,
    },
    /// Revoke a bridge (id, alias or peer home id; one that names bridges both ways is
    /// refused: use the id); takes effect at once.
    Revoke {
        /// The bridge: its id, alias or peer home id.
        bridge: String,
    },
    /// Turn an inbound bridge's access off: calls are refused with `bridge_disabled`,
    /// messages it brought wait; nothing is deleted and the source keeps retrying.
    Disable {
        /// The inbound bridge: its id, alias or peer home id.
        bridge: String,
    },
    /// Turn an inbound bridge's access back on; held messages are delivered.
    Enable {
        /// The inbound bridge: its id, alias or peer home id.
        bridge: String,
    },
    /// Every bridge with its direction, peer, permissions and link health.
    List,
    /// The messages sent or received over a bridge and what became of them: the newest
    /// page first, each page oldest first.
    Receipts {
        /// The bridge: its id, alias or peer home id (both directions with that peer).
        bridge: String,
        /// Receipts per page, 1-100 (default 50).
        #[arg(long)]
        limit: Option<u32>,
        /// Older receipts: the cursor the previous page printed.
        #[arg(long)]
        cursor: Option<String>,
    },
}

pub async fn run(home: &Path, command: BridgeCommand, json: bool) -> Result<()> {
    let mut bridges = connect(home).await?.bridges();
    match command {
        BridgeCommand::Request { address, want, expect, name } => {
            request(&mut bridges, address, want, expect, name, json).await
        }
        BridgeCommand::Pending => pending(&mut bridges, json).await,
        BridgeCommand::Approve { request, allow, workspaces, name } => {
            approve(&mut bridges, request, allow, workspaces, name, json).await
        }
        BridgeCommand::Rename { bridge, name } => rename(&mut bridges, bridge, name, json).await,
        BridgeCommand::Reject { request } => reject(&mut bridges, request, json).await,
        BridgeCommand::Revoke { bridge } => revoke(&mut bridges, bridge, json).await,
        BridgeCommand::Disable { bridge } => set_inbound(&mut bridges, bridge, false, json).await,
        BridgeCommand::Enable { bridge } => set_inbound(&mut bridges, bridge, true, json).await,
        BridgeCommand::List => list(&mut bridges, json).await,
        BridgeCommand::Receipts { bridge, limit, cursor } => {
            receipts(&mut bridges, bridge, limit, cursor, json).await
        }
    }
}

async fn request(
    bridges: &mut BridgeClient,
    address: String,
    want: Vec<String>,
    expect: Option<String>,
    name: Option<String>,
    json: bool,
) -> Result<()> {
    let request = pb::BridgeRequestRequest {
        address,
        want,
        expect: expect.unwrap_or_default(),
        name: name.unwrap_or_default(),
    };
    let done = bridges.bridge_request(request).await?.into_inner();
    if json {
        print_json(&done);
    } else if let Some(b) = &done.bridge {
        outln!(
            "requested {} as {:?} (request {}); waiting for its owner's approval",
            b.peer_home_id,
            b.alias,
            done.request_id
        );
    }
    Ok(())
}

async fn pending(bridges: &mut BridgeClient, json: bool) -> Result<()> {
    let pending = bridges.bridge_pending(pb::BridgePendingRequest {}).await?.into_inner();
    if json {
        print_json(&pending);
        return Ok(());
    }
    for r in &pending.requests {
        outln!(
            "{}  from {} ({}, at {})  wants {}  since {}",
            r.id,
            r.peer_home_id,
            r.name,
            if r.address.is_empty() { "an unknown address" } else { &r.address },
            permissions(&r.want),
            r.created_at
        );
    }
    if pending.requests.is_empty() {
        outln!("(no pending requests)");
    }
    Ok(())
}

async fn approve(
    bridges: &mut BridgeClient,
    request_id: String,
    allow: Vec<String>,
    workspaces: Vec<String>,
    name: Option<String>,
    json: bool,
) -> Result<()> {
    let workspaces = workspaces.into_iter().map(absolute_if_dir).collect();
    let request = pb::BridgeApproveRequest { request_id, allow, workspaces, name: name.unwrap_or_default() };
    let approved = bridges.bridge_approve(request).await?.into_inner();
    if json {
        print_json(&approved);
    } else if let Some(b) = &approved.bridge {
        outln!("bridge {} from {} ({}): {}{}", b.id, b.peer_home_id, b.alias, granted(b), scope(b));
    }
    Ok(())
}

async fn rename(bridges: &mut BridgeClient, bridge: String, name: String, json: bool) -> Result<()> {
    let renamed = bridges.bridge_rename(pb::BridgeRenameRequest { bridge, name }).await?.into_inner();
    if json {
        print_json(&renamed);
    } else if let Some(b) = &renamed.bridge {
        outln!("{} ({} {}) is now named {}", b.id, b.direction().word(), b.peer_home_id, b.alias);
    }
    Ok(())
}

async fn reject(bridges: &mut BridgeClient, request_id: String, json: bool) -> Result<()> {
    let rejected = bridges.bridge_reject(pb::BridgeRejectRequest { request_id }).await?.into_inner();
    if json {
        print_json(&rejected);
    } else {
        outln!("rejected");
    }
    Ok(())
}

async fn revoke(bridges: &mut BridgeClient, bridge: String, json: bool) -> Result<()> {
    let revoked = bridges.bridge_revoke(pb::BridgeRevokeRequest { bridge }).await?.into_inner();
    if json {
        print_json(&revoked);
    } else if let Some(b) = &revoked.bridge {
        outln!("revoked {} ({} {})", b.id, b.direction().word(), b.peer_home_id);
    }
    Ok(())
}

/// `kiki bridge disable|enable BRIDGE`.
async fn set_inbound(bridges: &mut BridgeClient, bridge: String, enabled: bool, json: bool) -> Result<()> {
    let set = bridges.bridge_set_inbound(pb::BridgeSetInboundRequest { bridge, enabled }).await?.into_inner();
    if json {
        print_json(&set);
    } else if let Some(b) = &set.bridge {
        let done = if enabled { "enabled" } else { "disabled" };
        outln!("{done} {} ({} {})", b.id, b.direction().word(), b.peer_home_id);
    }
    Ok(())
}

async fn list(bridges: &mut BridgeClient, json: bool) -> Result<()> {
    let list = bridges.bridge_list(pb::BridgeListRequest {}).await?.into_inner();
    if json {
        print_json(&list);
        return Ok(());
    }
    outln!("listening on {}", list.listen);
    for b in &list.bridges {
        let never = |at: &str| if at.is_empty() { "never".to_string() } else { at.to_string() };
        let mut health = format!("last success {}", never(&b.last_success));
        if !b.last_error_at.is_empty() {
            health.push_str(&format!(", last error {} ({})", b.last_error_at, b.last_error));
        }
        // What this home asked for, where the grant is not (yet) that.
        let asked = match permissions(&b.requested) {
            asked if asked.is_empty() || asked == permissions(&b.permissions) => String::new(),
            asked => format!(" (requested {asked})"),
        };
        outln!(
            "{}  {:<8} {:<9} {} ({})  [{}]{asked}{}  {health}, {} pending",
            b.id,
            b.direction().word(),
            b.state().word(),
            b.peer_home_id,
            b.alias,
            granted(b),
            scope(b),
            b.pending
        );
    }
    if list.bridges.is_empty() {
        outln!("(no bridges)");
    }
    Ok(())
}

async fn receipts(
    bridges: &mut BridgeClient,
    bridge: String,
    limit: Option<u32>,
    cursor: Option<String>,
    json: bool,
) -> Result<()> {
    let request = pb::BridgeReceiptsRequest { bridge, limit, cursor: cursor.unwrap_or_default() };
    let receipts = bridges.bridge_receipts(request).await?.into_inner();
    if json {
        print_json(&receipts);
        return Ok(());
    }
    for r in &receipts.receipts {
        let reason = match r.reason.as_str() {
            "" => String::new(),
            // A reason that only repeats the status says nothing more.
            same if same == r.status().word() => String::new(),
            reason => format!(" ({reason})"),
        };
        // A refusal at the target stored no message: it has no id.
        let id = if r.message_id.is_empty() { "-" } else { &r.message_id };
        outln!(
            "{}  {:<8} {}  key {}  {}{reason}  attempts {}  {}",
            id,
            r.direction().word(),
            r.target,
            r.idempotency_key,
            r.status().word(),
            r.attempts,
            r.at
        );
    }
    if receipts.receipts.is_empty() {
        outln!("(no receipts)");
    }
    // On stderr, like every paging hint: stdout holds the receipts alone.
    if let Some(next) = &receipts.next_cursor {
        hint!("older: --cursor {next}");
    }
    Ok(())
}
