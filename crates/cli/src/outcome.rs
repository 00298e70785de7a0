//! What an operator's command printed, and how its process should exit.

/// What a command printed, and how the process should exit.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub output: String,
    pub exit_code: i32,
}

impl Outcome {
    /// `output`, exiting 0.
    pub fn ok(output: String) -> Self {
        Outcome {
            output,
            exit_code: 0,
        }
    }
}
