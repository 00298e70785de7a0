//! `agentenkit chat --agent NAME`: turns in this process, approvals asked
//! on the terminal.

use std::io::Write;
use std::sync::Arc;

use agentenkit_core::reply::Verdict;
use agentenkit_core::Owner;
use agentenkit_runtime::inline::{Hooks, InlineRunner};
use agentenkit_store::PendingInput;
use async_trait::async_trait;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};
use tokio::sync::Mutex;

use crate::{AgentConfig, Connections};

type Input = Arc<Mutex<Lines<BufReader<Stdin>>>>;

struct TerminalHooks {
    input: Input,
}

#[async_trait]
impl Hooks for TerminalHooks {
    async fn await_approval(&self, pending: &PendingInput) -> Verdict {
        let arguments = serde_json::to_string_pretty(&pending.arguments).unwrap_or_default();
        let who = if pending.depth > 0 {
            format!(" (asked by {})", pending.run_name)
        } else {
            String::new()
        };
        print!(
            "\n{} wants to call {}{who} with\n{arguments}\nApprove? [y/N] ",
            pending.run_name, pending.tool_name
        );
        let _ = std::io::stdout().flush();
        let line = self.input.lock().await.next_line().await.ok().flatten();
        match line.as_deref().map(str::trim) {
            Some("y" | "Y" | "yes") => Verdict::Approve { payload: None },
            _ => Verdict::Reject {
                reason: Some("declined at the terminal".into()),
            },
        }
    }
}

pub async fn run(
    connections: Connections,
    agents: AgentConfig,
    agent: String,
    owner: String,
) -> anyhow::Result<()> {
    let registry = agents.load()?;
    if registry.agent(&agent).is_none() {
        let known: Vec<&str> = registry.agent_names().collect();
        anyhow::bail!("unknown agent {agent:?}; the agent file has {known:?}");
    }
    let store = connections.store()?;
    store.migrate().await?;
    let runner = InlineRunner::start(store.clone(), registry, Owner(owner));
    let thread = runner.create_thread(&agent).await?;
    let input: Input = Arc::new(Mutex::new(BufReader::new(tokio::io::stdin()).lines()));
    let hooks = TerminalHooks {
        input: input.clone(),
    };
    println!("Chatting with {agent} (thread {thread}). An empty line or end of input quits.");
    let mut seen = 0i64;
    loop {
        print!("\nyou> ");
        let _ = std::io::stdout().flush();
        let line = input.lock().await.next_line().await?;
        let Some(line) = line.filter(|l| !l.trim().is_empty()) else {
            break;
        };
        let run = runner.run_turn(thread, &line, &hooks).await?;
        for message in store.list_messages(thread, runner.owner()).await? {
            if message.id <= seen {
                continue;
            }
            seen = message.id;
            print_message(&message.body);
        }
        if let Some(error) = run.error.filter(|_| run.status.as_str() != "completed") {
            println!("(the run {}: {error})", run.status);
        }
    }
    runner.shutdown().await?;
    Ok(())
}

fn print_message(body: &Value) {
    let text = |v: &Value| {
        v.as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| v.to_string())
    };
    match body["role"].as_str() {
        Some("assistant") => {
            for call in body["toolCalls"].as_array().into_iter().flatten() {
                println!(
                    "assistant: calls {}({})",
                    text(&call["name"]),
                    call["arguments"]
                );
            }
            if let Some(content) = body["content"].as_str() {
                println!("assistant: {content}");
            }
        }
        Some("tool") => println!("tool {}: {}", text(&body["name"]), body["content"]),
        _ => {}
    }
}
