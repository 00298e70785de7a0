//! The operator's command line: the inbox, replies, threads and runs, over
//! the HTTP API (`AGENTENKIT_URL`, `AGENTENKIT_API_KEY`). Text for people
//! by default, the API's own JSON with `--json`.
//!
//! Exit codes: 0 done (a reply delivered), 1 the API refused or could not
//! be reached (its `{error, message}` is printed), 3 a reply was not
//! delivered (the request was no longer open; the reason is printed; for
//! `decide`, any one of its decisions).

mod render;

use anyhow::Context;
use clap::{Args, Subcommand};
use render::{pretty, render_inbox, render_run, render_thread};
use serde_json::{json, Value};

/// Where the API is and who calls it.
#[derive(Debug, Clone, Args)]
pub struct ApiTarget {
    /// The API's base URL.
    #[arg(
        long = "url",
        env = "AGENTENKIT_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// The API key to call with.
    #[arg(
        long = "api-key",
        env = "AGENTENKIT_API_KEY",
        default_value = "",
        hide_env_values = true,
        hide_default_value = true
    )]
    pub api_key: String,
    /// Print the API's JSON answer instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The operator's commands.
#[derive(Debug, Clone, Subcommand)]
pub enum OpsCommand {
    /// Every open request of the key's threads.
    Inbox {
        #[command(flatten)]
        api: ApiTarget,
    },
    /// Approves a request (the tool runs with the payload).
    Approve {
        #[command(flatten)]
        api: ApiTarget,
        run: String,
        call: String,
        /// JSON handed to the tool as `approval.payload`.
        #[arg(long, value_parser = parse_json)]
        payload: Option<Value>,
        /// Edited arguments (a JSON object) the tool runs with instead of
        /// the proposed ones; the model is told.
        #[arg(long, value_parser = parse_json)]
        arguments: Option<Value>,
        /// A note the model reads with the tool's result.
        #[arg(long)]
        message: Option<String>,
        /// The argumentsHash the inbox showed: refused if the call's
        /// arguments are no longer those.
        #[arg(long = "arguments-hash")]
        arguments_hash: Option<String>,
    },
    /// Rejects a request (the tool does not run; the model sees the reason).
    Reject {
        #[command(flatten)]
        api: ApiTarget,
        run: String,
        call: String,
        #[arg(long)]
        reason: Option<String>,
        /// The argumentsHash the inbox showed (as for approve).
        #[arg(long = "arguments-hash")]
        arguments_hash: Option<String>,
    },
    /// Answers a question set: `{"<questionId>": ["value", ...]}`.
    Answer {
        #[command(flatten)]
        api: ApiTarget,
        run: String,
        call: String,
        #[arg(long, value_parser = parse_json)]
        answers: Value,
    },
    /// Leaves a question set unanswered (its defaults).
    Skip {
        #[command(flatten)]
        api: ApiTarget,
        run: String,
        call: String,
    },
    /// Many decisions in one request: a JSON file (`-` for stdin) holding
    /// `[{"action": "approve"|"deny"|"answer"|"skip", "runId", "toolCallId",
    /// …}]`, each settled on its own. With `--idempotency-key` a retry of
    /// the same file gets the same results.
    Decide {
        #[command(flatten)]
        api: ApiTarget,
        file: std::path::PathBuf,
        #[arg(long = "idempotency-key")]
        idempotency_key: Option<String>,
    },
    /// The webhook form: approve (`--approved`) or reject by thread.
    Respond {
        #[command(flatten)]
        api: ApiTarget,
        thread: String,
        call: String,
        #[arg(long)]
        approved: bool,
        #[arg(long, value_parser = parse_json)]
        payload: Option<Value>,
    },
    /// Threads.
    Threads {
        #[command(subcommand)]
        command: ThreadsCommand,
    },
    /// Runs.
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum ThreadsCommand {
    /// A thread: its agent, status, current run and open requests.
    Show {
        #[command(flatten)]
        api: ApiTarget,
        id: String,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum RunsCommand {
    /// A run: status, tree, output or error; `--journal` adds its journal.
    Show {
        #[command(flatten)]
        api: ApiTarget,
        id: String,
        #[arg(long)]
        journal: bool,
    },
    /// Moves the queued and parked runs of agent `--agent` to a newer
    /// version of it (`--to`, a hash or 8+ characters of one; the newest
    /// recorded by default) where that is safe, and lists the rest with
    /// why. Works on the database (DATABASE_URL), journaled per run.
    Upgrade {
        #[command(flatten)]
        connections: crate::Connections,
        #[arg(long)]
        agent: String,
        #[arg(long)]
        to: Option<String>,
        /// Say what would move; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

fn parse_json(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}

pub use crate::outcome::Outcome;

/// Exit code of a reply that was not delivered.
pub const NOT_DELIVERED: i32 = 3;

impl OpsCommand {
    /// Runs the command against the API. `Err` only when the API could not
    /// be reached or answered something unreadable; a refusal is an
    /// `Outcome` with exit code 1 and the API's message.
    pub async fn run(self) -> anyhow::Result<Outcome> {
        match self {
            OpsCommand::Inbox { api } => {
                let client = Client::new(&api)?;
                match client.fetch_all("/agent/inbox").await? {
                    Ok(inbox) if api.json => Ok(Outcome::ok(pretty(&inbox))),
                    Ok(inbox) => Ok(Outcome::ok(render_inbox(&inbox))),
                    Err(refused) => Ok(refused),
                }
            }
            OpsCommand::Decide {
                api,
                file,
                idempotency_key,
            } => {
                let body = crate::decide::read_decisions(&file)?;
                Client::new(&api)?
                    .decide(body, idempotency_key.as_deref())
                    .await
            }
            OpsCommand::Threads {
                command: ThreadsCommand::Show { api, id },
            } => {
                let client = Client::new(&api)?;
                client
                    .get(
                        &format!("/threads/{}", id_segment(&id, "thread")?),
                        |thread| Ok(render_thread(thread)),
                    )
                    .await
            }
            OpsCommand::Runs {
                command:
                    RunsCommand::Upgrade {
                        connections,
                        agent,
                        to,
                        dry_run,
                    },
            } => crate::upgrade::run(&connections, &agent, to.as_deref(), dry_run).await,
            OpsCommand::Runs {
                command: RunsCommand::Show { api, id, journal },
            } => show_run(&api, &id, journal).await,
            reply => {
                let (api, path, body) = reply.reply()?;
                Client::new(&api)?.reply(path, body).await
            }
        }
    }

    /// A reply command's request: the API, the route and the body.
    fn reply(self) -> anyhow::Result<(ApiTarget, &'static str, Value)> {
        Ok(match self {
            OpsCommand::Approve {
                api,
                run,
                call,
                payload,
                arguments,
                message,
                arguments_hash,
            } => {
                let body = with_fields(
                    json!({ "runId": run, "toolCallId": call }),
                    [
                        ("payload", payload),
                        ("arguments", arguments),
                        ("message", message.map(Value::from)),
                        ("argumentsHash", arguments_hash.map(Value::from)),
                    ],
                );
                (api, "/agent/tool-call/approve", body)
            }
            OpsCommand::Reject {
                api,
                run,
                call,
                reason,
                arguments_hash,
            } => {
                let body = with_fields(
                    json!({ "runId": run, "toolCallId": call }),
                    [
                        ("reason", reason.map(Value::from)),
                        ("argumentsHash", arguments_hash.map(Value::from)),
                    ],
                );
                (api, "/agent/tool-call/reject", body)
            }
            OpsCommand::Answer {
                api,
                run,
                call,
                answers,
            } => {
                let body = json!({ "runId": run, "toolCallId": call, "answers": answers });
                (api, "/agent/tool-call/answer", body)
            }
            OpsCommand::Skip { api, run, call } => {
                let body = json!({ "runId": run, "toolCallId": call });
                (api, "/agent/tool-call/skip", body)
            }
            OpsCommand::Respond {
                api,
                thread,
                call,
                approved,
                payload,
            } => {
                let body = with_fields(
                    json!({ "threadId": thread, "toolCallId": call, "approved": approved }),
                    [("payload", payload)],
                );
                (api, "/agent/hitl/respond", body)
            }
            _ => anyhow::bail!("the command is not a reply"),
        })
    }
}

/// `body` with each field that is present.
fn with_fields<const N: usize>(mut body: Value, fields: [(&str, Option<Value>); N]) -> Value {
    for (name, value) in fields {
        if let Some(value) = value {
            body[name] = value;
        }
    }
    body
}

/// `runs show`: the run, and its journal when asked for.
async fn show_run(api: &ApiTarget, id: &str, journal: bool) -> anyhow::Result<Outcome> {
    let client = Client::new(api)?;
    let path = format!("/runs/{}", id_segment(id, "run")?);
    let run = match client.fetch(&path).await? {
        Ok(run) => run,
        Err(refused) => return Ok(refused),
    };
    let journal = if journal {
        match client.fetch_all(&format!("{path}/journal")).await? {
            Ok(entries) => Some(entries),
            Err(refused) => return Ok(refused),
        }
    } else {
        None
    };
    if api.json {
        let mut value = run;
        if let Some(entries) = journal {
            value["journal"] = entries;
        }
        return Ok(Outcome::ok(pretty(&value)));
    }
    Ok(Outcome::ok(render_run(&run, journal.as_ref())))
}

/// An id for a path: ids are UUIDs, and anything else is refused here
/// (percent-encoding alone would not do: URL parsers read `%2E%2E` as `..`).
fn id_segment(id: &str, what: &str) -> anyhow::Result<String> {
    let parsed: uuid::Uuid = id
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("{id:?} is not a {what} id (a UUID)"))?;
    Ok(parsed.hyphenated().to_string())
}

struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
    json: bool,
}

impl Client {
    fn new(api: &ApiTarget) -> anyhow::Result<Client> {
        if api.api_key.is_empty() {
            anyhow::bail!("no API key: set AGENTENKIT_API_KEY (or pass --api-key)");
        }
        Ok(Client {
            http: agentenkit_runtime::tls::http_client()
                .timeout(std::time::Duration::from_secs(30))
                .build()?,
            base: api.url.trim_end_matches('/').to_owned(),
            key: api.api_key.clone(),
            json: api.json,
        })
    }

    /// The API's JSON answer, or the refusal to print.
    async fn fetch(&self, path: &str) -> anyhow::Result<Result<Value, Outcome>> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .send()
            .await
            .with_context(|| format!("reaching the API at {}", self.base))?;
        self.read(response).await
    }

    /// Every item of a paged list, following its `Link` headers.
    async fn fetch_all(&self, path: &str) -> anyhow::Result<Result<Value, Outcome>> {
        let mut items = Vec::new();
        let mut url = format!("{}{path}", self.base);
        let mut seen = std::collections::HashSet::new();
        loop {
            let response = self
                .http
                .get(&url)
                .bearer_auth(&self.key)
                .send()
                .await
                .with_context(|| format!("reaching the API at {}", self.base))?;
            let next = response
                .headers()
                .get(reqwest::header::LINK)
                .and_then(|link| link.to_str().ok())
                .and_then(crate::paging::next_page);
            match self.read(response).await? {
                Ok(Value::Array(page)) => items.extend(page),
                Ok(other) => anyhow::bail!("the API answered {path} with a non-list: {other}"),
                Err(refused) => return Ok(Err(refused)),
            }
            // A cursor seen before would go round for ever.
            match next {
                Some((after, limit)) if seen.insert(after.clone()) => {
                    url = format!("{}{path}?after={after}", self.base);
                    if let Some(limit) = limit {
                        url.push_str(&format!("&limit={limit}"));
                    }
                }
                _ => return Ok(Ok(Value::Array(items))),
            }
        }
    }

    async fn get(
        &self,
        path: &str,
        render: impl FnOnce(&Value) -> anyhow::Result<String>,
    ) -> anyhow::Result<Outcome> {
        match self.fetch(path).await? {
            Ok(value) if self.json => Ok(Outcome::ok(pretty(&value))),
            Ok(value) => Ok(Outcome::ok(render(&value)?)),
            Err(refused) => Ok(refused),
        }
    }

    async fn reply(&self, path: &str, body: Value) -> anyhow::Result<Outcome> {
        let answer = match self.post(path, &body, None).await? {
            Ok(answer) => answer,
            Err(refused) => return Ok(refused),
        };
        let delivered = answer["delivered"].as_bool().unwrap_or(false);
        let output = if self.json {
            pretty(&answer)
        } else if delivered {
            "delivered\n".to_owned()
        } else {
            format!(
                "not delivered: {}\n",
                answer["error"].as_str().unwrap_or("no reason given")
            )
        };
        Ok(Outcome {
            output,
            exit_code: if delivered { 0 } else { NOT_DELIVERED },
        })
    }

    async fn decide(&self, body: Value, key: Option<&str>) -> anyhow::Result<Outcome> {
        let answer = match self.post("/agent/decisions", &body, key).await? {
            Ok(answer) => answer,
            Err(refused) => return Ok(refused),
        };
        let (text, all_delivered) = crate::decide::render_results(&body, &answer);
        Ok(Outcome {
            output: if self.json { pretty(&answer) } else { text },
            exit_code: if all_delivered { 0 } else { NOT_DELIVERED },
        })
    }

    /// POSTs `body` to `path` (with an `Idempotency-Key` when given): the
    /// API's JSON answer, or the refusal to print.
    async fn post(
        &self,
        path: &str,
        body: &Value,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<Result<Value, Outcome>> {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .json(body);
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("reaching the API at {}", self.base))?;
        self.read(response).await
    }

    async fn read(&self, response: reqwest::Response) -> anyhow::Result<Result<Value, Outcome>> {
        let status = response.status();
        let text = response.text().await.context("reading the API's answer")?;
        let value: Value = serde_json::from_str(&text).with_context(|| {
            format!(
                "the API answered {status} with something that is not JSON: {}",
                text.chars().take(200).collect::<String>()
            )
        })?;
        if status.is_success() {
            return Ok(Ok(value));
        }
        let output = if self.json {
            pretty(&value)
        } else {
            format!(
                "error: {} {}: {}\n",
                status.as_u16(),
                value["error"].as_str().unwrap_or("Error"),
                value["message"].as_str().unwrap_or("")
            )
        };
        Ok(Err(Outcome {
            output,
            exit_code: 1,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: OpsCommand,
    }

    #[test]
    fn commands_parse_with_their_json_arguments() {
        let parsed = Cli::try_parse_from([
            "x",
            "approve",
            "RUN",
            "c1",
            "--payload",
            r#"{"note": 1}"#,
            "--api-key",
            "k",
        ])
        .unwrap();
        match parsed.command {
            OpsCommand::Approve { payload, api, .. } => {
                assert_eq!(payload, Some(json!({ "note": 1 })));
                assert_eq!(api.api_key, "k");
            }
            other => panic!("{other:?}"),
        }
        let refused = Cli::try_parse_from(["x", "answer", "RUN", "c1", "--answers", "{nope"]);
        assert!(refused.unwrap_err().to_string().contains("not JSON"));
        let runs = Cli::try_parse_from(["x", "runs", "show", "R", "--journal", "--json"]).unwrap();
        assert!(matches!(
            runs.command,
            OpsCommand::Runs {
                command: RunsCommand::Show {
                    journal: true,
                    api: ApiTarget { json: true, .. },
                    ..
                }
            }
        ));
    }

    #[test]
    fn an_id_cannot_change_the_path() {
        let id = "01a23393-2524-73d5-8fc1-66b0f4425275";
        assert_eq!(id_segment(id, "run").unwrap(), id);
        assert_eq!(id_segment(&id.to_uppercase(), "run").unwrap(), id);
        for bad in ["..", ".", "../agent/inbox", "%2E%2E", "a b?c", ""] {
            let refused = id_segment(bad, "run").unwrap_err().to_string();
            assert!(refused.contains("is not a run id"), "{bad}: {refused}");
        }
    }
}
