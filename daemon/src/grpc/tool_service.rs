//! `kiki.v1.ToolService`: the session tools, listed and called through one generic pair of
//! calls (see `tools`).

use kiki_proto as pb;
use tonic::{Request, Response, Status};

use super::{caller, status};
use crate::convert::{approval_to_pb, tool_outcome_to_pb};
use crate::threads::Threads;
use crate::tools::SessionTools;

pub struct ToolServiceImpl {
    threads: Threads,
    tools: SessionTools,
    /// ToolList's answer: the registry does not change while kikid runs.
    listed: pb::ToolListResponse,
}

impl ToolServiceImpl {
    pub fn new(threads: Threads, tools: SessionTools) -> Self {
        let listed = pb::ToolListResponse {
            tools: tools
                .registry()
                .all()
                .map(|tool| pb::ToolSpec {
                    name: tool.name.to_string(),
                    title: tool.title.to_string(),
                    description: tool.description.to_string(),
                    input_schema: tool.schema.to_string(),
                    read_only: tool.read_only,
                    approval: approval_to_pb(tool.approval) as i32,
                })
                .collect(),
        };
        Self { threads, tools, listed }
    }
}

#[tonic::async_trait]
impl pb::tool_service_server::ToolService for ToolServiceImpl {
    async fn tool_list(
        &self,
        _request: Request<pb::ToolListRequest>,
    ) -> Result<Response<pb::ToolListResponse>, Status> {
        Ok(Response::new(self.listed.clone()))
    }

    async fn tool_call(
        &self,
        request: Request<pb::ToolCallRequest>,
    ) -> Result<Response<pb::ToolCallResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let called = self.tools.call(&caller, &r.name, &r.arguments, &r.thread_id).await.map_err(status)?;
        Ok(Response::new(pb::ToolCallResponse {
            text: called.text,
            structured: called.structured.map(|s| s.to_string()).unwrap_or_default(),
            outcome: tool_outcome_to_pb(called.outcome) as i32,
            seq: called.seq as u64,
        }))
    }
}
