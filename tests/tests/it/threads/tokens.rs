//! A turn's token: it acts as its thread while the turn runs (a thread it creates without
//! a cwd lands in the parent's workspace root) and ends with the turn.

use kiki_proto as pb;
use kiki_tests::{TestHome, eventually, local};
use tonic::Code;

#[tokio::test]
async fn a_turn_token_acts_as_its_thread_and_expires_with_the_turn() {
    let kiki = kiki_tests::binaries::binary("kiki");
    // Inside the turn: create a thread without --cwd (the parent's workspace root), and
    // keep the token to try it after the turn.
    let script = format!(
        "cd /; echo \"$KIKI_TOKEN\" > \"$KIKI_HOME/token\"; {} thread create --json --title child | grep '\"cwd\"'",
        kiki.display()
    );
    let home = TestHome::builder().shell_profile("agent", &script).start().await;
    let (_, t) = thread_in_repo_subdir(&home, "agent").await;
    let turn = home.wait_turns(&t.id, 1).await.remove(0);
    assert_eq!(turn.status(), pb::TurnStatus::Completed, "{}", turn.error);
    // The CLI sends its working directory (here /), so the child lands there; a raw API
    // call without cwd from the turn lands in the parent's workspace root.
    assert!(turn.output.contains("\"cwd\": \"/\""), "{}", turn.output);

    let token = std::fs::read_to_string(home.dir().join("token")).expect("token").trim().to_string();
    let stale = home.client().clone().with_token(&token).expect("token");
    let err = stale
        .threads()
        .thread_create(pb::ThreadCreateRequest::default())
        .await
        .expect_err("the token ended with its turn");
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(err.message().contains("turn ends"), "{}", err.message());
}

#[tokio::test]
async fn an_api_create_without_cwd_from_a_turn_uses_the_parent_workspace_root() {
    // The agent calls the API directly (as an MCP server would) with its token.
    let home_dir_probe = "read _; echo \"$KIKI_TOKEN\" > \"$KIKI_HOME/token\"; sleep 5";
    let home = TestHome::builder().shell_profile("hold", home_dir_probe).start().await;
    let (repo, t) = thread_in_repo_subdir(&home, "hold").await;
    let token = eventually("the turn's token", || async {
        std::fs::read_to_string(home.dir().join("token")).ok().filter(|t| t.ends_with('\n'))
    })
    .await;
    let agent = home.client().clone().with_token(token.trim()).expect("token");
    let child =
        agent.threads().thread_create(pb::ThreadCreateRequest::default()).await.expect("create").into_inner();
    assert_eq!(child.cwd, repo.display().to_string(), "the caller's workspace root");
    assert_eq!(child.workspace_id, t.workspace_id);
    // Owner actions are not agent tools.
    let say = agent
        .home()
        .thread_say(pb::ThreadSayRequest { target: Some(local(&child.id)), content: "x".into() })
        .await;
    assert_eq!(say.expect_err("owner only").code(), Code::PermissionDenied);
}

/// A repository (`repo/.git`) with a thread on `profile` started in `repo/sub`.
async fn thread_in_repo_subdir(
    home: &TestHome,
    profile: &str,
) -> (std::path::PathBuf, pb::ThreadCreateResponse) {
    let repo = home.workdir("repo");
    std::fs::create_dir_all(repo.join(".git")).expect("git");
    std::fs::create_dir_all(repo.join("sub")).expect("sub");
    let t = home
        .create(pb::ThreadCreateRequest {
            cwd: Some(repo.join("sub").display().to_string()),
            profile: Some(profile.into()),
            prompt: Some("go".into()),
            title: None,
            resume_agent_session: None,
        })
        .await
        .expect("create");
    (repo, t)
}
