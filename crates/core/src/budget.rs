//! Budgets that park (docs/budgets.md): what a run may spend before a
//! person is asked, counted from what the journal holds, so a replay and a
//! crash agree on what was spent and on when the run asked.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How many model calls a run makes before it asks, when its agent does
/// not say (it was the fixed cap at which a run failed).
pub const DEFAULT_MODEL_CALLS: u64 = 64;

/// The id of the row that asks for more budget before model call `n`.
pub fn request_id(n: u32) -> String {
    format!("budget~{n}")
}

/// The tool name a budget request is shown with.
pub const REQUEST_NAME: &str = "budget";

/// What a budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    ModelCalls,
    ToolCalls,
    InputTokens,
    OutputTokens,
    /// In millionths of a dollar (`cost_usd` in dollars where people
    /// read or write it).
    CostUsd,
}

impl Measure {
    pub const ALL: [Measure; 5] = [
        Measure::ModelCalls,
        Measure::ToolCalls,
        Measure::InputTokens,
        Measure::OutputTokens,
        Measure::CostUsd,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Measure::ModelCalls => "model_calls",
            Measure::ToolCalls => "tool_calls",
            Measure::InputTokens => "input_tokens",
            Measure::OutputTokens => "output_tokens",
            Measure::CostUsd => "cost_usd",
        }
    }

    /// An amount of it, for people: `1,234 input tokens`, `$1.25`.
    fn shown(self, amount: u64) -> String {
        match self {
            Measure::ModelCalls => format!("{} model calls", grouped(amount)),
            Measure::ToolCalls => format!("{} tool calls", grouped(amount)),
            Measure::InputTokens => format!("{} input tokens", grouped(amount)),
            Measure::OutputTokens => format!("{} output tokens", grouped(amount)),
            Measure::CostUsd => format!("${:.2}", amount as f64 / 1e6),
        }
    }

    /// An amount of it as JSON: a count, or dollars.
    fn value(self, amount: u64) -> Value {
        match self {
            Measure::CostUsd => Value::from(amount as f64 / 1e6),
            _ => Value::from(amount),
        }
    }
}

impl fmt::Display for Measure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A budget: at most this much of each measure it names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// In millionths of a dollar; `cost_usd` (dollars) in the file.
    #[serde(
        default,
        rename = "cost_usd",
        with = "dollars",
        skip_serializing_if = "Option::is_none"
    )]
    pub cost_micro_usd: Option<u64>,
}

/// `cost_usd` as dollars where people write it, millionths inside.
mod dollars {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(micro: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match micro {
            Some(micro) => s.serialize_some(&(*micro as f64 / 1e6)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        match Option::<f64>::deserialize(d)? {
            Some(usd) if usd.is_finite() && (0.0..1e12).contains(&usd) => {
                Ok(Some((usd * 1e6).round() as u64))
            }
            Some(usd) => Err(serde::de::Error::custom(format!(
                "cost_usd must be a number of dollars from 0, not {usd}"
            ))),
            None => Ok(None),
        }
    }
}

/// A model's price, in dollars per million tokens
/// (`price = { input_per_mtok, output_per_mtok }`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

impl Price {
    pub fn check(&self) -> Result<(), String> {
        let fine = |p: f64| p.is_finite() && p >= 0.0;
        match fine(self.input_per_mtok) && fine(self.output_per_mtok) {
            true => Ok(()),
            false => Err("a price is dollars per million tokens, from 0".into()),
        }
    }

    /// What `usage` cost, in millionths of a dollar (a dollar per million
    /// tokens is a millionth of a dollar per token).
    pub fn of(&self, usage: crate::conversation::Usage) -> u64 {
        let micro = usage.input_tokens as f64 * self.input_per_mtok
            + usage.output_tokens as f64 * self.output_per_mtok;
        micro.round() as u64
    }
}

impl Limits {
    pub fn get(&self, measure: Measure) -> Option<u64> {
        match measure {
            Measure::ModelCalls => self.model_calls,
            Measure::ToolCalls => self.tool_calls,
            Measure::InputTokens => self.input_tokens,
            Measure::OutputTokens => self.output_tokens,
            Measure::CostUsd => self.cost_micro_usd,
        }
    }

    fn slot(&mut self, measure: Measure) -> &mut Option<u64> {
        match measure {
            Measure::ModelCalls => &mut self.model_calls,
            Measure::ToolCalls => &mut self.tool_calls,
            Measure::InputTokens => &mut self.input_tokens,
            Measure::OutputTokens => &mut self.output_tokens,
            Measure::CostUsd => &mut self.cost_micro_usd,
        }
    }

    /// Names no limit at all.
    pub fn is_empty(&self) -> bool {
        Measure::ALL.into_iter().all(|m| self.get(m).is_none())
    }

    /// A run's budget: these limits, with model calls at
    /// [`DEFAULT_MODEL_CALLS`] when they name none.
    pub fn for_run(self) -> Limits {
        Limits {
            model_calls: Some(self.model_calls.unwrap_or(DEFAULT_MODEL_CALLS)),
            ..self
        }
    }

    /// Each limit a budget names must allow something.
    pub fn check(&self) -> Result<(), String> {
        match Measure::ALL.into_iter().find(|m| self.get(*m) == Some(0)) {
            Some(zero) => Err(format!("a budget's {zero} must be more than 0")),
            None => Ok(()),
        }
    }

    /// Both added up, a measure either names counted (grants of a
    /// thread's runs, together).
    pub fn summed(mut self, other: &Limits) -> Limits {
        for measure in Measure::ALL {
            if let Some(more) = other.get(measure) {
                let slot = self.slot(measure);
                *slot = Some(slot.unwrap_or(0).saturating_add(more));
            }
        }
        self
    }

    /// These limits raised by `add` (a measure `add` names that these do
    /// not stays unlimited).
    pub fn raised(mut self, add: &Limits) -> Limits {
        for measure in Measure::ALL {
            if let (Some(limit), Some(more)) = (self.get(measure), add.get(measure)) {
                *self.slot(measure) = Some(limit.saturating_add(more));
            }
        }
        self
    }

    /// The first measure `spent` has used up, if any: the next step would
    /// pass it (`size` is how much the budget as configured allows of it,
    /// what an approval that names no amounts adds).
    pub fn exhausted(&self, scope: Scope, spent: &Spent, configured: &Limits) -> Option<Exhausted> {
        Measure::ALL.into_iter().find_map(|measure| {
            let limit = self.get(measure)?;
            let used = spent.get(measure);
            (used >= limit).then(|| Exhausted {
                scope,
                measure,
                used,
                limit,
                size: configured.get(measure).unwrap_or(limit).max(1),
            })
        })
    }
}

/// What a run has spent so far, as its journal says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spent {
    pub model_calls: u64,
    pub tool_calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Millionths of a dollar, as priced when spent (nothing without a
    /// price).
    pub cost_micro_usd: u64,
}

impl Spent {
    pub fn get(&self, measure: Measure) -> u64 {
        match measure {
            Measure::ModelCalls => self.model_calls,
            Measure::ToolCalls => self.tool_calls,
            Measure::InputTokens => self.input_tokens,
            Measure::OutputTokens => self.output_tokens,
            Measure::CostUsd => self.cost_micro_usd,
        }
    }

    /// A model call that reported `usage` and made `calls` tool calls, at
    /// `price`, if the model has one.
    pub fn add_model_call(
        &mut self,
        usage: crate::conversation::Usage,
        calls: usize,
        price: Option<&Price>,
    ) {
        // Saturating: an absurd report must not wrap a count below its
        // budget.
        self.model_calls = self.model_calls.saturating_add(1);
        self.tool_calls = self.tool_calls.saturating_add(calls as u64);
        self.input_tokens = self.input_tokens.saturating_add(usage.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(usage.output_tokens);
        self.cost_micro_usd = self
            .cost_micro_usd
            .saturating_add(price.map_or(0, |p| p.of(usage)));
    }

    /// Both together.
    pub fn plus(self, other: Spent) -> Spent {
        Spent {
            model_calls: self.model_calls.saturating_add(other.model_calls),
            tool_calls: self.tool_calls.saturating_add(other.tool_calls),
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            cost_micro_usd: self.cost_micro_usd.saturating_add(other.cost_micro_usd),
        }
    }
}

/// Whose spending a budget bounds: the run's own, or the thread's (every
/// run of it, this one included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    #[default]
    Run,
    Thread,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Run => "run",
            Scope::Thread => "thread",
        }
    }
}

/// A budget used up: the request a run parks with, journaled as
/// `budget:<n>` (so a replay asks at the same point, whatever the agent's
/// budget has become).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exhausted {
    #[serde(default)]
    pub scope: Scope,
    pub measure: Measure,
    pub used: u64,
    pub limit: u64,
    /// What an approval that names no amounts adds.
    pub size: u64,
}

impl Exhausted {
    /// What the person is asked.
    pub fn question(&self) -> String {
        let whose = match self.scope {
            Scope::Run => "",
            Scope::Thread => "the thread ",
        };
        let used = match self.measure {
            Measure::CostUsd => self.measure.shown(self.used),
            _ => grouped(self.used),
        };
        let limit = self.measure.shown(self.limit);
        format!("{whose}used {used} of {limit}; allow more?")
    }

    /// Why a run ends when the person says no (or nobody answers).
    pub fn refusal(&self, how: &str) -> String {
        let (used, limit) = match self.measure {
            Measure::CostUsd => (
                self.measure.shown(self.used),
                self.measure.shown(self.limit),
            ),
            _ => (grouped(self.used), grouped(self.limit)),
        };
        format!(
            "budget {}.{} used up ({used} of {limit}) and more was {how}",
            self.scope.as_str(),
            self.measure,
        )
    }

    /// The arguments the request is shown with.
    pub fn arguments(&self) -> Value {
        serde_json::json!({
            "budget": self.scope.as_str(),
            "measure": self.measure,
            "used": self.measure.value(self.used),
            "limit": self.measure.value(self.limit),
            "add": { self.measure.as_str(): self.measure.value(self.size) },
            "question": self.question(),
        })
    }

    /// What an approval with `payload` grants: the measure used up goes
    /// past what was used by the amount the payload's `add` names for it
    /// (`{"add": {"input_tokens": 100000}}`, dollars for `cost_usd`), or by
    /// the budget's own size when it names none, or none usable (the
    /// person said yes: the run must get past this point). Returned as the
    /// increase of the limit, what a thread's other runs add up.
    pub fn grant(&self, payload: Option<&Value>) -> Limits {
        let named = payload
            .and_then(|p| p.get("add"))
            .and_then(|add| add.get(self.measure.as_str()))
            .and_then(|amount| match self.measure {
                Measure::CostUsd => amount
                    .as_f64()
                    .filter(|usd| usd.is_finite() && *usd > 0.0)
                    .map(|usd| (usd * 1e6).round().min(u64::MAX as f64) as u64),
                _ => amount.as_u64(),
            })
            .filter(|more| *more > 0);
        let more = named.unwrap_or(self.size);
        let past = self.used.max(self.limit).saturating_add(more);
        let mut add = Limits::default();
        *add.slot(self.measure) = Some(past - self.limit);
        add
    }
}

/// More budget, granted by the answer to a request: journaled as
/// `budget:<n>:granted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub scope: Scope,
    pub add: Limits,
}

/// What a thread's runs but one spent, and the thread budget their
/// answers granted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadSpending {
    pub spent: Spent,
    pub granted: Limits,
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests;
