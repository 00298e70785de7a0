//! How journal entries are stored: a `persist:toolcall:<callId>` entry
//! repeats the call's `id`, `name` and `arguments` exactly as the nearest
//! earlier model entry (`model:<n>`, whose `toolCalls` hold them) has them;
//! when both are written in the same commit (a step that parks on its
//! calls, the common case) it is stored without them and read back with
//! them. A persist entry committed after its model entry (a function tool
//! ran first in the step) is stored whole. Both entries are immutable, so
//! the reference can never change under it.
//!
//! What `GET /runs/{id}/journal` and replay see is the journal as written,
//! byte for byte (the golden-file test holds it): [`unpack`] puts back
//! exactly what [`pack`] left out, which the property tests below check.

use serde_json::Value;

use agentenkit_core::journal::{names, JournalEntry};

/// The entry's `id`, `name` and `arguments` are those of the call with its
/// id in the nearest earlier `model:<n>` entry, and were left out.
pub const PACKED_CALL: i16 = 1;

const MODEL: &str = "model:";
const CALL_FIELDS: [&str; 3] = ["id", "name", "arguments"];

/// A journal entry as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEntry {
    pub position: u32,
    pub name: String,
    pub value: Value,
    pub packed: i16,
}

/// A journal entry being written, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct NewEntry<'a> {
    pub position: u32,
    pub name: &'a str,
    pub value: &'a Value,
}

/// What to store of the entries one commit appends (in position order, at
/// the journal's end): `(value, packed)` for each. An entry is packed only
/// against a model entry of the same commit, which is then the nearest
/// earlier one in the whole journal too: every entry between them is in
/// the commit. That needs the entries to follow each other, as the
/// checkpointer appends them; entries that do not are refused.
pub fn pack(entries: &[NewEntry<'_>]) -> Result<Vec<(Value, i16)>, NotConsecutive> {
    if entries
        .windows(2)
        .any(|pair| pair[1].position != pair[0].position + 1)
    {
        return Err(NotConsecutive(
            entries.iter().map(|entry| entry.position).collect(),
        ));
    }
    let mut model: Option<&Value> = None;
    Ok(entries
        .iter()
        .map(|&entry| {
            if entry.name.starts_with(MODEL) {
                model = Some(entry.value);
            }
            match model.and_then(|model| packed_call(entry, model)) {
                Some(value) => (value, PACKED_CALL),
                None => (entry.value.clone(), 0),
            }
        })
        .collect())
}

/// The positions of a commit's entries, which do not follow each other.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a commit's journal entries are not consecutive: {0:?}")]
pub struct NotConsecutive(pub Vec<u32>);

/// The entry's value without the call's fields, if `model` has that call
/// with the same fields.
fn packed_call(entry: NewEntry<'_>, model: &Value) -> Option<Value> {
    let call_id = names::call_of_persist(entry.name)?;
    let call = call_in(model, call_id)?;
    let Value::Object(value) = entry.value else {
        return None;
    };
    if CALL_FIELDS
        .iter()
        .any(|field| value.get(*field).is_none() || value.get(*field) != call.get(*field))
    {
        return None;
    }
    let mut rest = value.clone();
    for field in CALL_FIELDS {
        rest.remove(field);
    }
    Some(Value::Object(rest))
}

/// The position of the model entry of one commit's `entries` that proposed
/// call `call_id` with exactly `arguments`: a call row proposed in that
/// commit stores the position instead of its arguments, and readers take
/// them from that entry (`arguments` of the first call with the id in its
/// `toolCalls`, as [`proposed_arguments`] does and the store's SQL reads
/// them). The nearest earlier model entry is preferred; any one that holds
/// the same arguments reads back the same.
pub fn proposing_entry(entries: &[NewEntry<'_>], call_id: &str, arguments: &Value) -> Option<u32> {
    entries
        .iter()
        .rev()
        .filter(|entry| entry.name.starts_with(MODEL))
        .find(|entry| proposed_arguments(entry.value, call_id) == Some(arguments))
        .map(|entry| entry.position)
}

/// The arguments of call `call_id` as model entry `model` proposed them.
pub fn proposed_arguments<'a>(model: &'a Value, call_id: &str) -> Option<&'a Value> {
    call_in(model, call_id)?.get("arguments")
}

/// The assistant message a model entry holds: `role` "assistant", its
/// `text` as `content` and its `toolCalls`, each only when the entry has it
/// (as `Message::assistant` of the response it was written from). The
/// store's SQL builds the same from the stored entry, key for key, to read
/// a message row stored without its body.
pub fn assistant_message(model: &Value) -> Value {
    let mut message = serde_json::Map::new();
    message.insert("role".to_owned(), Value::from("assistant"));
    if let Some(text) = model.get("text") {
        message.insert("content".to_owned(), text.clone());
    }
    if let Some(calls) = model.get("toolCalls") {
        message.insert("toolCalls".to_owned(), calls.clone());
    }
    Value::Object(message)
}

/// The position of the model entry of one commit's `entries` that holds
/// message `body` exactly (see [`assistant_message`]): a message row
/// written in that commit stores the position instead of the body. The
/// nearest earlier model entry is preferred.
pub fn message_entry(entries: &[NewEntry<'_>], body: &Value) -> Option<u32> {
    if body.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    entries
        .iter()
        .rev()
        .filter(|entry| entry.name.starts_with(MODEL))
        .find(|entry| assistant_message(entry.value) == *body)
        .map(|entry| entry.position)
}

/// The first call with id `call_id` in a model entry's `toolCalls`.
fn call_in<'a>(model: &'a Value, call_id: &str) -> Option<&'a Value> {
    model
        .get("toolCalls")?
        .as_array()?
        .iter()
        .find(|call| call.get("id").and_then(Value::as_str) == Some(call_id))
}

/// The journal as written, from the whole journal as stored (in position
/// order).
pub fn unpack(entries: Vec<StoredEntry>) -> Result<Vec<JournalEntry>, UnpackJournalError> {
    let mut journal: Vec<JournalEntry> = Vec::with_capacity(entries.len());
    // The index in `journal` of the nearest model entry so far.
    let mut model: Option<usize> = None;
    for entry in entries {
        let value = match entry.packed {
            0 => entry.value,
            PACKED_CALL => {
                let call_id = names::call_of_persist(&entry.name).ok_or_else(|| {
                    UnpackJournalError::new(&entry, "only a persist entry is packed")
                })?;
                let call = model
                    .and_then(|at| call_in(&journal[at].value, call_id))
                    .ok_or_else(|| {
                        UnpackJournalError::new(&entry, "no earlier model entry has its call")
                    })?;
                let Value::Object(mut value) = entry.value else {
                    return Err(UnpackJournalError::new(&entry, "not an object"));
                };
                for field in CALL_FIELDS {
                    if let Some(v) = call.get(field) {
                        value.insert(field.to_owned(), v.clone());
                    }
                }
                Value::Object(value)
            }
            other => {
                return Err(UnpackJournalError::new(
                    &entry,
                    &format!("unknown packing {other} (written by a newer version?)"),
                ))
            }
        };
        if entry.name.starts_with(MODEL) {
            model = Some(journal.len());
        }
        journal.push(JournalEntry {
            position: entry.position,
            name: entry.name,
            value,
        });
    }
    Ok(journal)
}

/// A stored entry that cannot be read back as written. Replay must not
/// guess: the run fails loudly instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("journal entry {position} ({name}): {why}")]
pub struct UnpackJournalError {
    pub position: u32,
    pub name: String,
    pub why: String,
}

impl UnpackJournalError {
    fn new(entry: &StoredEntry, why: &str) -> Self {
        UnpackJournalError {
            position: entry.position,
            name: entry.name.clone(),
            why: why.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn entry(position: u32, name: &str, value: Value) -> JournalEntry {
        JournalEntry {
            position,
            name: name.to_owned(),
            value,
        }
    }

    fn approval_turn() -> Vec<JournalEntry> {
        vec![
            entry(
                0,
                "model:0",
                json!({"toolCalls": [{"arguments": {"to": "a@b.c"}, "id": "c1", "name": "tool"}],
                       "usage": {"inputTokens": 15, "outputTokens": 5}}),
            ),
            entry(
                1,
                "persist:toolcall:c1",
                json!({"arguments": {"to": "a@b.c"}, "id": "c1", "kind": "approval",
                       "name": "tool", "toolType": "action"}),
            ),
        ]
    }

    /// `pack` of one commit's entries, as stored rows.
    fn stored(entries: &[JournalEntry]) -> Vec<StoredEntry> {
        let new: Vec<NewEntry> = entries
            .iter()
            .map(|e| NewEntry {
                position: e.position,
                name: &e.name,
                value: &e.value,
            })
            .collect();
        pack(&new)
            .expect("consecutive")
            .into_iter()
            .zip(entries)
            .map(|((value, packed), e)| StoredEntry {
                position: e.position,
                name: e.name.clone(),
                value,
                packed,
            })
            .collect()
    }

    fn stored_whole(entries: &[JournalEntry]) -> Vec<StoredEntry> {
        entries
            .iter()
            .map(|e| StoredEntry {
                position: e.position,
                name: e.name.clone(),
                value: e.value.clone(),
                packed: 0,
            })
            .collect()
    }

    #[test]
    fn a_persisted_call_keeps_only_what_the_model_entry_does_not_hold() {
        let journal = approval_turn();
        let stored = stored(&journal);
        assert_eq!(stored[0].packed, 0);
        assert_eq!(stored[1].packed, PACKED_CALL);
        assert_eq!(
            stored[1].value,
            json!({"kind": "approval", "toolType": "action"})
        );
        assert_eq!(unpack(stored), Ok(journal));
    }

    #[test]
    fn a_call_the_model_entry_has_otherwise_or_not_at_all_is_stored_whole() {
        let mut journal = approval_turn();
        journal[1].value["arguments"] = json!({"to": "other"});
        assert_eq!(stored(&journal)[1].packed, 0);
        // The model entry was committed earlier: nothing to pack against.
        assert_eq!(stored(&journal[1..])[0].packed, 0);
        let mut journal = approval_turn();
        journal[1].name = "persist:toolcall:c2".into();
        assert_eq!(stored(&journal)[1].packed, 0);
    }

    /// Stored in `journal.packed`: never renumber it.
    #[test]
    fn the_stored_bit_keeps_its_value() {
        assert_eq!(PACKED_CALL, 1);
    }

    #[test]
    fn a_commit_whose_entries_do_not_follow_each_other_is_refused() {
        let value = json!(1);
        let at = |position| NewEntry {
            position,
            name: "exec:c1",
            value: &value,
        };
        assert_eq!(pack(&[at(3), at(5)]), Err(NotConsecutive(vec![3, 5])));
        assert_eq!(pack(&[at(3), at(3)]), Err(NotConsecutive(vec![3, 3])));
        assert_eq!(pack(&[at(3), at(4)]).map(|v| v.len()), Ok(2));
        assert_eq!(pack(&[]), Ok(vec![]));
    }

    #[test]
    fn a_packed_entry_that_cannot_be_read_back_is_an_error() {
        let mut stored = stored(&approval_turn());
        let persist = stored.remove(1);
        assert!(unpack(vec![persist.clone()]).is_err(), "no model entry");
        let mut unknown = persist;
        unknown.packed = 2;
        assert!(unpack(vec![unknown]).is_err());
        assert_eq!(
            unpack(stored_whole(&approval_turn())),
            Ok(approval_turn()),
            "entries stored whole read back as they are"
        );
    }

    fn small_json() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-z]{0,6}".prop_map(Value::String),
            prop::collection::btree_map("[a-z]{1,4}", "[a-z]{0,4}", 0..3).prop_map(|m| json!(m)),
        ]
    }

    /// A journal of model entries with calls, persist entries that match a
    /// call, differ from it, or name no call, and other entries.
    fn journal() -> impl Strategy<Value = Vec<JournalEntry>> {
        let step = (
            prop::collection::vec(("[a-c]", "[a-z]{1,3}", small_json()), 0..3),
            prop::collection::vec((0usize..4, any::<bool>(), small_json()), 0..4),
            any::<bool>(),
        );
        prop::collection::vec(step, 1..4).prop_map(|steps| {
            let mut out = Vec::new();
            for (model, (calls, persists, with_other)) in steps.into_iter().enumerate() {
                let tool_calls: Vec<Value> = calls
                    .iter()
                    .map(|(id, name, args)| json!({"id": id, "name": name, "arguments": args}))
                    .collect();
                out.push((format!("model:{model}"), json!({"toolCalls": tool_calls})));
                for (pick, same, extra) in persists {
                    let (id, name, args) =
                        calls
                            .get(pick)
                            .cloned()
                            .unwrap_or(("z".into(), "n".into(), Value::Null));
                    let args = if same { args } else { json!([args]) };
                    out.push((
                        format!("persist:toolcall:{id}"),
                        json!({"id": id, "name": name, "arguments": args, "kind": extra}),
                    ));
                }
                if with_other {
                    out.push(("exec:c".into(), json!({"ok": true})));
                }
            }
            out.into_iter()
                .enumerate()
                .map(|(i, (name, value))| entry(i as u32, &name, value))
                .collect()
        })
    }

    fn new_entries(entries: &[JournalEntry]) -> Vec<NewEntry<'_>> {
        entries
            .iter()
            .map(|e| NewEntry {
                position: e.position,
                name: &e.name,
                value: &e.value,
            })
            .collect()
    }

    #[test]
    fn a_call_is_found_in_the_model_entry_that_proposed_it_with_the_same_arguments() {
        let turn = approval_turn();
        let entries = new_entries(&turn);
        assert_eq!(
            proposing_entry(&entries, "c1", &json!({"to": "a@b.c"})),
            Some(0)
        );
        // Other arguments (a park that changed them), another call, or no
        // model entry in the commit: the row keeps its arguments.
        assert_eq!(
            proposing_entry(&entries, "c1", &json!({"to": "x@y.z"})),
            None
        );
        assert_eq!(
            proposing_entry(&entries, "c2", &json!({"to": "a@b.c"})),
            None
        );
        assert_eq!(
            proposing_entry(&entries[1..], "c1", &json!({"to": "a@b.c"})),
            None
        );
        // The persist entry has the same fields, but only a model entry counts.
        let persist_only = vec![entry(
            3,
            "persist:toolcall:c1",
            json!({"arguments": {"to": "a@b.c"}, "id": "c1", "name": "tool"}),
        )];
        assert_eq!(
            proposing_entry(&new_entries(&persist_only), "c1", &json!({"to": "a@b.c"})),
            None
        );
    }

    #[test]
    fn an_assistant_message_is_found_in_the_model_entry_it_came_from() {
        let turn = approval_turn();
        let entries = new_entries(&turn);
        let message = json!({"role": "assistant",
                             "toolCalls": [{"arguments": {"to": "a@b.c"}, "id": "c1", "name": "tool"}]});
        assert_eq!(message_entry(&entries, &message), Some(0));
        // With text the entry does not have, another role, or no model
        // entry in the commit: the row keeps its body.
        let mut with_text = message.clone();
        with_text["content"] = json!("hi");
        assert_eq!(message_entry(&entries, &with_text), None);
        let mut as_user = message.clone();
        as_user["role"] = json!("user");
        assert_eq!(message_entry(&entries, &as_user), None);
        assert_eq!(message_entry(&entries[1..], &message), None);
        let answer = json!({"text": "Done.", "usage": {"inputTokens": 1, "outputTokens": 1}});
        assert_eq!(
            assistant_message(&answer),
            json!({"role": "assistant", "content": "Done."})
        );
    }

    #[test]
    fn the_first_call_with_the_id_is_the_proposed_one() {
        let model = json!({"toolCalls": [
            {"id": "c1", "name": "a", "arguments": {"n": 1}},
            {"id": "c1", "name": "a", "arguments": {"n": 2}},
        ]});
        assert_eq!(proposed_arguments(&model, "c1"), Some(&json!({"n": 1})));
        let entries = [NewEntry {
            position: 4,
            name: "model:1",
            value: &model,
        }];
        assert_eq!(proposing_entry(&entries, "c1", &json!({"n": 2})), None);
        assert_eq!(proposing_entry(&entries, "c1", &json!({"n": 1})), Some(4));
    }

    proptest! {
        /// A call found in a model entry reads back the arguments it was
        /// proposed with, whatever the entry holds besides.
        #[test]
        fn a_proposed_calls_arguments_read_back_from_its_entry(journal in journal()) {
            let entries = new_entries(&journal);
            for entry in journal.iter().filter(|e| e.name.starts_with(MODEL)) {
                let calls = entry.value.get("toolCalls").and_then(Value::as_array);
                for call in calls.into_iter().flatten() {
                    let (Some(id), Some(arguments)) =
                        (call.get("id").and_then(Value::as_str), call.get("arguments"))
                    else {
                        continue;
                    };
                    if let Some(at) = proposing_entry(&entries, id, arguments) {
                        let model = &journal.iter().find(|e| e.position == at).unwrap().value;
                        prop_assert_eq!(proposed_arguments(model, id), Some(arguments));
                    }
                }
            }
        }

        /// The message the runtime writes for a model response is the one
        /// its journaled entry gives back, so a row stored without its
        /// body reads back as written.
        #[test]
        fn a_responses_assistant_message_is_what_its_entry_holds(
            text in prop::option::of("[a-z ]{0,8}"),
            calls in prop::collection::vec(("[a-c]", "[a-z]{1,3}", small_json()), 0..3),
            tokens in (0u64..100, 0u64..100),
        ) {
            use agentenkit_core::conversation::{Message, ModelResponse, ToolCallRequest, Usage};
            let response = ModelResponse {
                text,
                tool_calls: calls
                    .into_iter()
                    .map(|(id, name, arguments)| ToolCallRequest {
                        id: agentenkit_core::ToolCallId(id),
                        name,
                        arguments,
                    })
                    .collect(),
                usage: Usage { input_tokens: tokens.0, output_tokens: tokens.1 },
            };
            let entry = serde_json::to_value(&response).unwrap();
            let message = serde_json::to_value(Message::assistant(&response)).unwrap();
            prop_assert_eq!(assistant_message(&entry), message.clone());
            let entries = [NewEntry { position: 2, name: "model:0", value: &entry }];
            prop_assert_eq!(message_entry(&entries, &message), Some(2));
        }

        /// Whatever a sequence of commits appends reads back as written.
        #[test]
        fn unpack_gives_back_the_journal_as_written(journal in journal(), cut in 0usize..12) {
            // Two commits: the entries before `cut`, then the rest.
            let cut = cut.min(journal.len());
            let mut rows = stored(&journal[..cut]);
            rows.extend(stored(&journal[cut..]));
            prop_assert_eq!(unpack(rows), Ok(journal));
        }
    }
}
