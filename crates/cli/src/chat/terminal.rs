//! The terminal of `agentenkit chat`: who gets the next line typed.
//!
//! A line goes to whoever asks for one (the `you>` prompt, an approval, a
//! question). A line typed while nobody asks is kept for the next prompt
//! while the chat is between turns or a person is being asked (type-ahead),
//! and queued on the thread as a message while a turn works.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex};

use agentenkit_core::{Owner, ThreadId};
use agentenkit_store::{Arrival, Store};
use tokio::sync::oneshot;

use crate::shown::shown;

#[derive(Default)]
pub(super) struct Terminal {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    reader: Option<oneshot::Sender<Option<String>>>,
    /// Lines typed ahead of the prompt that takes them.
    typed_ahead: VecDeque<String>,
    /// A turn works (its lines, when nobody asks, are messages to queue).
    working: bool,
    /// A person is being asked about a request: lines are answers.
    asking: bool,
    /// Standard input ended: nobody gets another line.
    closed: bool,
}

/// While it lives, lines are answers (see [`Terminal::asking`]).
pub(super) struct Asking<'a>(&'a Terminal);

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        if let Ok(mut state) = self.0.state.lock() {
            state.asking = false;
        }
    }
}

impl Terminal {
    /// Shows `prompt` and takes the next line typed (`None` at the end of
    /// input): one typed ahead, or the next. The line is claimed before the
    /// prompt shows, so one typed as soon as it appears is this prompt's.
    pub(super) async fn ask(&self, prompt: &str) -> Option<String> {
        let (sender, line) = oneshot::channel();
        {
            let mut state = self.state.lock().ok()?;
            if let Some(ahead) = state.typed_ahead.pop_front() {
                print!("{prompt}");
                let _ = std::io::stdout().flush();
                return Some(ahead);
            }
            if state.closed {
                return None;
            }
            state.reader = Some(sender);
        }
        print!("{prompt}");
        let _ = std::io::stdout().flush();
        line.await.ok().flatten()
    }

    /// A turn starts (`true`) or has ended.
    pub(super) fn working(&self, working: bool) {
        if let Ok(mut state) = self.state.lock() {
            state.working = working;
        }
    }

    /// A person is being asked about a request until the guard drops.
    pub(super) fn asking(&self) -> Asking<'_> {
        if let Ok(mut state) = self.state.lock() {
            state.asking = true;
        }
        Asking(self)
    }

    /// Reads standard input to its end, handing each line to whoever asks
    /// for it, keeping it for the next prompt, or queueing it on `thread`.
    pub(super) async fn dispatch(self: Arc<Self>, store: Store, owner: Owner, thread: ThreadId) {
        // A thread of its own blocks on the terminal: the runtime's blocking
        // pool would hold the process open at exit, waiting for a line.
        let (sender, mut lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        loop {
            let line = lines.recv().await;
            let Some(message) = self.route(line) else {
                if self.state.lock().map_or(true, |s| s.closed) {
                    return;
                }
                continue;
            };
            match store
                .post_turn(thread, &owner, &message, Arrival::Enqueue, None)
                .await
            {
                Ok(posted) if posted.queued => println!("(queued: it runs when this turn ends)"),
                // The turn had just ended: this one runs now, and the next
                // prompt's turn follows it.
                Ok(_) => println!("(sent: it runs now)"),
                Err(e) => println!("(not queued: {})", shown(&e.to_string(), false)),
            }
        }
    }

    /// Where `line` goes; the message to queue, when it is one.
    fn route(&self, line: Option<String>) -> Option<String> {
        let mut state = self.state.lock().ok()?;
        let Some(line) = line else {
            state.closed = true;
            if let Some(reader) = state.reader.take() {
                let _ = reader.send(None);
            }
            return None;
        };
        if let Some(reader) = state.reader.take() {
            let _ = reader.send(Some(line));
            return None;
        }
        if state.asking || !state.working {
            state.typed_ahead.push_back(line);
            return None;
        }
        (!line.trim().is_empty()).then_some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> Option<String> {
        Some(text.to_owned())
    }

    #[tokio::test]
    async fn a_line_goes_to_the_prompt_ahead_of_it_or_to_the_thread_while_a_turn_works() {
        let terminal = Terminal::default();
        // Between turns: kept for the next prompt.
        assert_eq!(terminal.route(line("hello")), None);
        assert_eq!(terminal.ask("you> ").await.as_deref(), Some("hello"));
        // While a turn works and nobody asks: a message to queue (a blank
        // one is nothing).
        terminal.working(true);
        assert_eq!(terminal.route(line("also cc Dana")), line("also cc Dana"));
        assert_eq!(terminal.route(line("  ")), None);
        // While a person is asked: an answer, even typed before the prompt.
        {
            let _asking = terminal.asking();
            assert_eq!(terminal.route(line("y")), None);
            assert_eq!(terminal.ask("Approve? ").await.as_deref(), Some("y"));
        }
        assert_eq!(terminal.route(line("more")), line("more"));
        terminal.working(false);
        // The end of input: a waiting prompt gets None, and so does the next.
        let terminal = Arc::new(terminal);
        let waiting = {
            let terminal = terminal.clone();
            tokio::spawn(async move { terminal.ask("you> ").await })
        };
        while terminal.state.lock().unwrap().reader.is_none() {
            tokio::task::yield_now().await;
        }
        assert_eq!(terminal.route(None), None);
        assert_eq!(waiting.await.unwrap(), None);
        assert_eq!(terminal.ask("you> ").await, None);
    }
}
