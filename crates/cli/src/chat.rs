//! `agentenkit chat --agent NAME`: turns in this process, approvals asked
//! on the terminal. A line typed while a turn works (and nothing asks) is
//! queued on the thread: its turn runs when this one ends.

use std::sync::Arc;

use agentenkit_core::questions::{Question, QuestionSet};
use agentenkit_core::reply::Verdict;
use agentenkit_core::Owner;
use agentenkit_runtime::inline::{Hooks, InlineRunner};
use agentenkit_store::PendingInput;
use async_trait::async_trait;
use serde_json::{json, Value};

use crate::shown::shown;
use crate::{AgentConfig, Connections};

mod terminal;

use terminal::Terminal;

struct TerminalHooks {
    terminal: Arc<Terminal>,
}

impl TerminalHooks {
    async fn ask(&self, prompt: &str) -> Option<String> {
        self.terminal.ask(prompt).await
    }
}

/// Parses one answer line against a question: empty keeps the defaults
/// (`None`), `-` is an explicit none, otherwise option numbers or values
/// separated by commas. `Err` says what was wrong, to ask again.
fn parse_choice(line: &str, question: &Question) -> Result<Option<Vec<String>>, String> {
    let line = line.trim();
    if line.is_empty() {
        return Ok(None);
    }
    if line == "-" {
        return Ok(Some(vec![]));
    }
    // A text or a number is the line itself, checked as the server will.
    if question.kind.is_typed() {
        return match question.value_issue(line) {
            Some(problem) => Err(problem),
            None => Ok(Some(vec![line.to_owned()])),
        };
    }
    let mut values = Vec::new();
    for part in line.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let option = match part.parse::<usize>() {
            Ok(n) if (1..=question.options.len()).contains(&n) => &question.options[n - 1],
            _ => question
                .options
                .iter()
                .find(|o| o.value == part)
                .ok_or_else(|| format!("{part:?} is not one of the options"))?,
        };
        values.push(option.value.clone());
    }
    if !question.multiple && values.len() > 1 {
        return Err("pick one".into());
    }
    Ok(Some(values))
}

#[async_trait]
impl Hooks for TerminalHooks {
    /// "Question 1 of N" with the defaults pre-picked; Enter confirms them.
    async fn await_answers(&self, pending: &PendingInput) -> Option<Value> {
        let set = QuestionSet::parse(pending.request.as_ref()?).ok()?;
        let _asking = self.terminal.asking();
        if let Some(preamble) = &set.preamble {
            println!(
                "\n{}: {}",
                shown(&pending.run_name, false),
                shown(preamble, true)
            );
        }
        let total = set.questions.len();
        let mut answers = serde_json::Map::new();
        for (i, question) in set.questions.iter().enumerate() {
            println!(
                "\nQuestion {} of {total}: {}",
                i + 1,
                shown(&question.prompt, true)
            );
            // A server's page to open first: its whole address, so the
            // person sees where it goes before they open it.
            if let Some(link) = &question.link {
                println!("  Open: {}", shown(link, false));
            }
            for (n, option) in question.options.iter().enumerate() {
                let picked = if question.defaults.contains(&option.value) {
                    "*"
                } else {
                    " "
                };
                println!("  {picked} {}. {}", n + 1, shown(&option.label, false));
            }
            if question.kind.is_typed() {
                for default in &question.defaults {
                    println!("  * {}", shown(default, false));
                }
            }
            let how = if question.kind.is_typed() {
                "the answer"
            } else if question.multiple {
                "numbers, comma-separated"
            } else {
                "a number"
            };
            loop {
                let prompt = format!(
                    "Enter keeps the * answer{}, or type {how} (- for none): ",
                    if question.multiple { "s" } else { "" }
                );
                let line = self.ask(&prompt).await.unwrap_or_default();
                match parse_choice(&line, question) {
                    Ok(None) => break,
                    Ok(Some(values)) => {
                        answers.insert(question.id.clone(), json!(values));
                        break;
                    }
                    Err(problem) => println!("  {problem}"),
                }
            }
        }
        Some(Value::Object(answers))
    }

    async fn await_approval(&self, pending: &PendingInput) -> Verdict {
        let _asking = self.terminal.asking();
        let arguments = shown(
            &serde_json::to_string_pretty(&pending.arguments).unwrap_or_default(),
            true,
        );
        let who = if pending.depth > 0 {
            format!(" (asked by {})", shown(&pending.run_name, false))
        } else {
            String::new()
        };
        let prompt = format!(
            "\n{} wants to call {}{who} with\n{arguments}\nApprove? [y/N] ",
            shown(&pending.run_name, false),
            shown(&pending.tool_name, false)
        );
        let line = self.ask(&prompt).await;
        match line.as_deref().map(str::trim) {
            Some("y" | "Y" | "yes") => Verdict::approve(),
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
    let registry = agents.load().await?;
    if registry.agent(&agent).is_none() {
        let known: Vec<&str> = registry.agent_names().collect();
        anyhow::bail!("unknown agent {agent:?}; the agent file has {known:?}");
    }
    let store = connections.store()?;
    store.migrate().await?;
    let runner = InlineRunner::start(store.clone(), registry, Owner(owner));
    let thread = runner.create_thread(&agent).await?;
    let terminal = Arc::new(Terminal::default());
    tokio::spawn(
        terminal
            .clone()
            .dispatch(store.clone(), runner.owner().clone(), thread),
    );
    let hooks = TerminalHooks {
        terminal: terminal.clone(),
    };
    println!(
        "Chatting with {agent} (thread {thread}). A line typed while a turn works is queued; \
         an empty line or end of input quits."
    );
    let mut seen = 0i64;
    loop {
        let line = terminal.ask("\nyou> ").await;
        let Some(line) = line.filter(|l| !l.trim().is_empty()) else {
            break;
        };
        terminal.working(true);
        let run = runner.run_turn(thread, &line, &hooks).await;
        terminal.working(false);
        let run = run?;
        for message in store
            .list_messages(
                thread,
                runner.owner(),
                seen,
                agentenkit_store::ReadBound::new(1000, usize::MAX),
            )
            .await?
            .items
        {
            if message.id <= seen {
                continue;
            }
            seen = message.id;
            print_message(&message.body, &line);
        }
        if let Some(error) = run.error.filter(|_| run.status.as_str() != "completed") {
            println!("(the run {}: {})", run.status, shown(&error, false));
        }
    }
    runner.shutdown().await?;
    Ok(())
}

/// One message of the conversation; a user message only when it is not the
/// line just `typed` at the prompt (a queued one, starting its turn).
fn print_message(body: &Value, typed: &str) {
    // Shown as it is, whatever the model wrote (see `crate::shown`).
    let text = |v: &Value| {
        shown(
            &v.as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string()),
            false,
        )
    };
    match body["role"].as_str() {
        Some("assistant") => {
            for call in body["toolCalls"].as_array().into_iter().flatten() {
                println!(
                    "assistant: calls {}({})",
                    text(&call["name"]),
                    shown(&call["arguments"].to_string(), false)
                );
            }
            if let Some(content) = body["content"].as_str() {
                println!("assistant: {}", shown(content, true));
            }
        }
        Some("tool") => println!(
            "tool {}: {}",
            text(&body["name"]),
            shown(&body["content"].to_string(), false)
        ),
        Some("user") if body["content"].as_str() != Some(typed) => {
            println!("you (queued): {}", text(&body["content"]));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question(multiple: bool) -> Question {
        serde_json::from_value(json!({
            "id": "q", "prompt": "p", "multiple": multiple, "defaults": ["a"],
            "options": [{"value": "a", "label": "A"}, {"value": "b", "label": "B"}]
        }))
        .unwrap()
    }

    #[test]
    fn a_typed_answer_is_the_line_checked_as_the_server_checks_it() {
        let hours: Question = serde_json::from_value(json!({
            "id": "hours", "prompt": "Hours?", "kind": "integer", "min": 1, "max": 72,
            "options": [], "defaults": ["24"]
        }))
        .unwrap();
        assert_eq!(parse_choice("", &hours), Ok(None));
        assert_eq!(parse_choice(" 4 ", &hours), Ok(Some(vec!["4".into()])));
        assert_eq!(parse_choice("-", &hours), Ok(Some(vec![])));
        assert_eq!(parse_choice("99", &hours), Err("at most 72".into()));
        assert!(parse_choice("soon", &hours)
            .unwrap_err()
            .contains("not a whole number"));
        let why: Question = serde_json::from_value(json!({
            "id": "why", "prompt": "Why?", "kind": "text", "options": [], "defaults": []
        }))
        .unwrap();
        assert_eq!(
            parse_choice("it, burns", &why),
            Ok(Some(vec!["it, burns".into()])),
            "a text's commas are its own"
        );
    }

    #[test]
    fn answer_lines() {
        let single = question(false);
        assert_eq!(parse_choice("", &single), Ok(None));
        assert_eq!(parse_choice(" 2 ", &single), Ok(Some(vec!["b".into()])));
        assert_eq!(parse_choice("b", &single), Ok(Some(vec!["b".into()])));
        assert_eq!(parse_choice("-", &single), Ok(Some(vec![])));
        assert!(parse_choice("1,2", &single).is_err());
        assert!(parse_choice("7", &single).is_err());
        assert_eq!(
            parse_choice("1, b", &question(true)),
            Ok(Some(vec!["a".into(), "b".into()]))
        );
    }
}
