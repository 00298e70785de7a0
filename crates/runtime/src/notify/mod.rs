//! Signed outbound notifications and reminders (docs/notifications.md).
//!
//! A deployment lists webhook targets; the events they want are written to
//! the outbox with the event (the store's `with_notified`), and a worker
//! sends them: signed (`agentenkit_core::notify`), retried with backoff,
//! dead after the target's last attempt, never in the way of a run. A tool
//! may also ask for a reminder to a second target while a call of it is
//! still waiting for a person (`remind_after`, `escalate_to`): a delayed
//! message, written with the park, like the expiry.

pub mod breaker;
mod deliver;
mod here;
mod payload;

use std::collections::BTreeMap;
use std::time::Duration;

use agentenkit_core::notify::{notifiable, parse_duration, NotifiedEvents, DEFAULT_EVENTS};
use agentenkit_core::EventType;
use agentenkit_store::RetryRule;

use crate::config::NotificationDef;
pub use crate::config::NotificationFormat;
use crate::error::{Error, Result};
pub use deliver::{Handled, Notifier};
pub use here::SendsHere;
pub use payload::{body, summary, Delivery, REMINDER_EVENT};

/// The shortest signing secret a target may have (256 bits).
pub const MIN_SECRET_BYTES: usize = 32;

/// How much longer than its slowest attempt a claim of a delivery holds.
const CLAIM_MARGIN: Duration = Duration::from_secs(2);

/// Attempts of a delivery before it is dead, unless the target says.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;
/// The wait after a first failure, unless the target says.
pub const DEFAULT_FIRST_RETRY: Duration = Duration::from_secs(1);
/// Deliveries a process makes at once (AGENTENKIT_NOTIFY_CONCURRENCY).
pub const DEFAULT_CONCURRENCY: usize = 8;
/// How long one attempt may take, unless the target says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a target's signing secret comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum TargetSecret {
    /// Unsigned (a Slack webhook, whose URL is the secret).
    None,
    /// Read from this environment variable when sending.
    Env(String),
    /// Given by the embedding program.
    Key(Vec<u8>),
}

impl std::fmt::Debug for TargetSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TargetSecret::None => f.write_str("None"),
            TargetSecret::Env(name) => write!(f, "Env({name:?})"),
            TargetSecret::Key(_) => f.write_str("Key(<redacted>)"),
        }
    }
}

/// One webhook target.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub url: reqwest::Url,
    pub secret: TargetSecret,
    pub events: NotifiedEvents,
    pub format: NotificationFormat,
    pub retry: RetryRule,
    pub timeout: Duration,
    /// When this process stops trying it for a while.
    pub breaker: breaker::BreakerRule,
}

impl Target {
    /// A JSON target told of the default events, unsigned until given a
    /// secret.
    pub fn new(name: impl Into<String>, url: &str) -> Result<Target> {
        let name = name.into();
        let url = parse_url(&name, url)?;
        // What is sent is signed, not hidden: a request's text and its
        // signature cross the network in the clear over http.
        if crate::net::clear_text_elsewhere(&url) {
            return Err(Error::Config(format!(
                "notification target {name}: the url must be https (http only to this machine)"
            )));
        }
        Ok(Target {
            name,
            url,
            secret: TargetSecret::None,
            events: DEFAULT_EVENTS.iter().copied().collect(),
            format: NotificationFormat::Json,
            retry: RetryRule {
                max_attempts: DEFAULT_MAX_ATTEMPTS,
                first_retry: DEFAULT_FIRST_RETRY,
            },
            timeout: DEFAULT_TIMEOUT,
            breaker: breaker::BreakerRule::default(),
        })
    }

    pub fn secret(mut self, secret: TargetSecret) -> Self {
        self.secret = secret;
        self
    }

    pub fn events(mut self, events: impl IntoIterator<Item = EventType>) -> Self {
        self.events = events.into_iter().collect();
        self
    }

    pub fn format(mut self, format: NotificationFormat) -> Self {
        self.format = format;
        self
    }

    pub fn retry(mut self, retry: RetryRule) -> Self {
        self.retry = retry;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn breaker(mut self, breaker: breaker::BreakerRule) -> Self {
        self.breaker = breaker;
        self
    }

    /// The secret's bytes now; `Err` names the variable when it is unset,
    /// and says so when the secret is shorter than [`MIN_SECRET_BYTES`]
    /// (a signature is only as strong as its key: nothing is sent signed
    /// with a short one).
    fn secret_bytes(&self) -> std::result::Result<Option<Vec<u8>>, String> {
        let (secret, named) = match &self.secret {
            TargetSecret::None => return Ok(None),
            TargetSecret::Key(key) => (key.clone(), "the secret".to_owned()),
            TargetSecret::Env(name) => match std::env::var(name) {
                Ok(value) if !value.is_empty() => {
                    (value.into_bytes(), format!("the secret in {name}"))
                }
                _ => return Err(format!("the secret's variable {name} is not set")),
            },
        };
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "{named} is {} bytes; a signing secret has at least {MIN_SECRET_BYTES}",
                secret.len()
            ));
        }
        Ok(Some(secret))
    }
}

fn parse_url(name: &str, url: &str) -> Result<reqwest::Url> {
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        Error::Config(format!(
            "notification target {name}: invalid url {}: {e}",
            crate::tool::redact_url(url)
        ))
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Error::Config(format!(
            "notification target {name}: the url must be http or https"
        )));
    }
    Ok(parsed)
}

/// A tool's reminder: who is told, and after how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    pub remind_after: Duration,
    pub target: String,
}

impl Escalation {
    /// From a tool's `remind_after` and `escalate_to`: both or neither.
    pub fn from_def(
        tool: &str,
        remind_after: Option<&str>,
        escalate_to: Option<&str>,
    ) -> Result<Option<Escalation>> {
        match (remind_after, escalate_to) {
            (None, None) => Ok(None),
            (Some(after), Some(target)) => {
                let remind_after = parse_duration(after)
                    .map_err(|e| Error::Config(format!("tool {tool}: remind_after: {e}")))?;
                if remind_after.as_millis() > u128::from(crate::tool::MAX_TTL_MS) {
                    return Err(Error::Config(format!(
                        "tool {tool}: remind_after must be at most 49 days"
                    )));
                }
                Ok(Some(Escalation {
                    remind_after,
                    target: target.to_owned(),
                }))
            }
            _ => Err(Error::Config(format!(
                "tool {tool}: remind_after and escalate_to go together"
            ))),
        }
    }
}

/// A deployment's notification targets, and where its inbox is.
#[derive(Debug, Clone, Default)]
pub struct Notifications {
    targets: BTreeMap<String, Target>,
    ui_url: Option<String>,
}

impl Notifications {
    /// From the agent file's `[notifications.*]` and `ui_url`.
    pub fn from_defs(
        ui_url: Option<String>,
        defs: BTreeMap<String, NotificationDef>,
    ) -> Result<Notifications> {
        let mut notifications = Notifications::default().with_ui_url(ui_url)?;
        for (name, def) in defs {
            let config =
                |message: String| Error::Config(format!("notification target {name}: {message}"));
            let secret = match (&def.secret_env, def.format) {
                (Some(env), _) if !env.trim().is_empty() => TargetSecret::Env(env.clone()),
                (_, NotificationFormat::Slack) => TargetSecret::None,
                _ => {
                    return Err(config(
                        "secret_env is required (the variable holding the signing secret)".into(),
                    ))
                }
            };
            let mut target = Target::new(name.clone(), &def.url)?
                .secret(secret)
                .format(def.format);
            if let Some(names) = def.events {
                let mut events = Vec::new();
                for event in names {
                    let parsed: EventType = event
                        .parse()
                        .ok()
                        .filter(|e| notifiable(*e))
                        .ok_or_else(|| {
                            config(format!(
                                "{event:?} is not an event it can be told of (INPUT_REQUIRED, \
                                 INPUT_RESOLVED, RUN_COMPLETED, RUN_FAILED, RUN_CANCELLED, \
                                 APPROVAL_RECORDED)"
                            ))
                        })?;
                    events.push(parsed);
                }
                target = target.events(events);
            }
            let max_attempts = def.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
            if !(1..=100).contains(&max_attempts) {
                return Err(config("max_attempts must be from 1 to 100".into()));
            }
            let first_retry = match def.first_retry_ms {
                Some(0) => return Err(config("first_retry_ms must be at least 1".into())),
                Some(ms) => Duration::from_millis(ms),
                None => DEFAULT_FIRST_RETRY,
            };
            target = target.retry(RetryRule {
                max_attempts,
                first_retry,
            });
            match def.timeout_ms {
                Some(ms) if (1..=60_000).contains(&ms) => {
                    target = target.timeout(Duration::from_millis(ms))
                }
                Some(_) => return Err(config("timeout_ms must be from 1 to 60000".into())),
                None => {}
            }
            let failures = def
                .circuit_failures
                .unwrap_or(breaker::DEFAULT_BREAKER_FAILURES);
            if failures == 0 {
                return Err(config("circuit_failures must be at least 1".into()));
            }
            let open_for = match def.circuit_open_ms {
                Some(ms) if (1..=3_600_000).contains(&ms) => Duration::from_millis(ms),
                Some(_) => return Err(config("circuit_open_ms must be from 1 to 3600000".into())),
                None => breaker::DEFAULT_BREAKER_OPEN,
            };
            target = target.breaker(breaker::BreakerRule { failures, open_for });
            notifications = notifications.with_target(target);
        }
        Ok(notifications)
    }

    pub fn with_target(mut self, target: Target) -> Self {
        self.targets.insert(target.name.clone(), target);
        self
    }

    /// Links in notifications go to `<ui_url>/ui`.
    pub fn with_ui_url(mut self, ui_url: Option<String>) -> Result<Self> {
        if let Some(url) = &ui_url {
            parse_url("(ui_url)", url)?;
        }
        self.ui_url = ui_url.map(|u| u.trim_end_matches('/').to_owned());
        Ok(self)
    }

    /// The inbox's address, when the deployment said where it is.
    pub fn inbox_link(&self) -> Option<String> {
        self.ui_url.as_ref().map(|u| format!("{u}/ui"))
    }

    /// Every event type some target is told of.
    pub fn events(&self) -> NotifiedEvents {
        self.targets
            .values()
            .fold(NotifiedEvents::NONE, |all, t| all.union(t.events))
    }

    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        self.targets.values()
    }

    pub fn target(&self, name: &str) -> Option<&Target> {
        self.targets.get(name)
    }

    /// The targets told of events of this type.
    /// Each target with each event type it wants, as `(target, type)`
    /// pairs (what a claim made before the event is read names).
    pub fn wanted(&self) -> Vec<(String, String)> {
        self.targets
            .values()
            .flat_map(|target| {
                target
                    .events
                    .iter()
                    .map(|event| (target.name.clone(), event.as_str().to_owned()))
            })
            .collect()
    }

    /// The longest attempt any target may take.
    pub fn longest_timeout(&self) -> Duration {
        self.targets
            .values()
            .map(|t| t.timeout)
            .max()
            .unwrap_or_default()
    }

    /// How long a claim of an event's delivery to every target holds: the
    /// slowest attempt, and a margin.
    pub fn claim(&self) -> Duration {
        self.longest_timeout() + CLAIM_MARGIN
    }

    pub fn targets_for(&self, event: EventType) -> Vec<&Target> {
        self.targets
            .values()
            .filter(|t| t.events.contains(event))
            .collect()
    }

    /// What is wrong with each secret from the environment that cannot
    /// sign (its variable unset, or the secret too short), naming the
    /// variable: a worker refuses to start with any (it would sign
    /// nothing).
    pub fn unusable_secrets(&self) -> Vec<String> {
        self.targets
            .values()
            .filter(|t| matches!(t.secret, TargetSecret::Env(_)))
            .filter_map(|t| t.secret_bytes().err())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defs(toml_text: &str) -> Result<Notifications> {
        let file = crate::config::AgentFile::parse(toml_text).map_err(Error::Config)?;
        Notifications::from_defs(file.ui_url, file.notifications)
    }

    #[test]
    fn targets_from_the_agent_file() {
        let n = defs(
            r#"
ui_url = "https://agents.example.com/"
[notifications.ops]
url = "https://hooks.example.com/agentenkit"
secret_env = "OPS_SECRET"
events = ["INPUT_REQUIRED", "RUN_CANCELLED"]
max_attempts = 3
[notifications.chat]
url = "https://hooks.slack.com/services/T/B/X"
format = "slack"
"#,
        )
        .unwrap();
        assert_eq!(
            n.inbox_link().as_deref(),
            Some("https://agents.example.com/ui")
        );
        let ops = n.target("ops").unwrap();
        assert_eq!(ops.secret, TargetSecret::Env("OPS_SECRET".into()));
        assert_eq!(ops.retry.max_attempts, 3);
        assert!(ops.events.contains(EventType::RunCancelled));
        assert!(!ops.events.contains(EventType::RunCompleted));
        let chat = n.target("chat").unwrap();
        assert_eq!(chat.secret, TargetSecret::None);
        assert_eq!(chat.format, NotificationFormat::Slack);
        assert!(chat.events.contains(EventType::RunCompleted));
        let all = n.events();
        assert!(all.contains(EventType::RunCancelled) && all.contains(EventType::RunFailed));
        assert!(!all.contains(EventType::Message));
        assert_eq!(n.targets_for(EventType::RunCancelled).len(), 1);
    }

    #[test]
    fn http_is_for_this_machine_and_a_secret_is_long_enough() {
        for url in [
            "http://127.0.0.1:9000/h",
            "http://localhost/h",
            "http://[::1]/h",
            "https://x/h",
        ] {
            assert!(Target::new("t", url).is_ok(), "{url}");
        }
        assert!(Target::new("t", "http://10.0.0.1/h").is_err());
        let with = |key: &[u8]| {
            Target::new("t", "https://x/h")
                .unwrap()
                .secret(TargetSecret::Key(key.to_vec()))
                .secret_bytes()
        };
        assert_eq!(
            with(&[7; MIN_SECRET_BYTES]),
            Ok(Some(vec![7; MIN_SECRET_BYTES]))
        );
        let short = with(b"whsec_short").unwrap_err();
        assert!(
            short.contains("11 bytes") && short.contains("at least 32"),
            "{short}"
        );
    }

    #[test]
    fn bad_targets_are_refused_with_where() {
        for (text, says) in [
            ("[notifications.a]\nurl = \"https://x\"\n", "secret_env"),
            ("[notifications.a]\nurl = \"ftp://x\"\nsecret_env = \"S\"\n", "http or https"),
            ("[notifications.a]\nurl = \"nope\"\nsecret_env = \"S\"\n", "invalid url"),
            ("[notifications.a]\nurl = \"https://x\"\nsecret_env = \"S\"\nevents = [\"MESSAGE\"]\n", "MESSAGE"),
            ("[notifications.a]\nurl = \"https://x\"\nsecret_env = \"S\"\nmax_attempts = 0\n", "max_attempts"),
            ("[notifications.a]\nurl = \"https://x\"\nsecret_env = \"S\"\ntimeout_ms = 0\n", "timeout_ms"),
            ("[notifications.a]\nurl = \"https://x\"\nsecret_env = \"S\"\nformat = \"xml\"\n", "xml"),
            ("[notifications.a]\nurl = \"https://x\"\nsecret = \"S\"\n", "secret"),
            ("[notifications.a]\nurl = \"http://hooks.example.com/h\"\nsecret_env = \"S\"\n", "must be https"),
        ] {
            let err = defs(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn escalations_need_both_halves() {
        assert_eq!(Escalation::from_def("t", None, None).unwrap(), None);
        assert_eq!(
            Escalation::from_def("t", Some("30m"), Some("ops")).unwrap(),
            Some(Escalation {
                remind_after: Duration::from_secs(1800),
                target: "ops".into()
            })
        );
        assert!(Escalation::from_def("t", Some("30m"), None).is_err());
        assert!(Escalation::from_def("t", None, Some("ops")).is_err());
        assert!(Escalation::from_def("t", Some("soon"), Some("ops")).is_err());
        assert!(Escalation::from_def("t", Some("50d"), Some("ops")).is_err());
    }

    #[test]
    fn a_missing_secret_is_named() {
        let n = Notifications::default()
            .with_target(
                Target::new("a", "https://x")
                    .unwrap()
                    .secret(TargetSecret::Env(
                        "AGENTENKIT_TEST_SURELY_UNSET_7F3A".into(),
                    )),
            )
            .with_target(
                Target::new("b", "https://y")
                    .unwrap()
                    .secret(TargetSecret::Key(b"k".to_vec())),
            );
        assert_eq!(
            n.unusable_secrets(),
            ["the secret's variable AGENTENKIT_TEST_SURELY_UNSET_7F3A is not set"]
        );
        assert!(!format!("{:?}", n.target("b").unwrap()).contains("[107]"));
    }
}
