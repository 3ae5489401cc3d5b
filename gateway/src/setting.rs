//! A setting refused: a flag (or its `RASA_*` variable, or its key in the configuration
//! file) whose value does not parse, is out of range, or contradicts another.

/// A setting refused, with the flag it names first (`--arena-size`, …) and the one-line
/// reason an operator reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SettingError {
    /// The flag the reason names first (`""` when it names none).
    pub flag: String,
    /// The reason, naming the flags.
    pub message: String,
}

impl SettingError {
    /// The setting the one-line `message` names (its first `--flag`) is refused.
    pub fn said(message: impl Into<String>) -> Self {
        let message = message.into();
        let flag = message
            .split(|c: char| c.is_whitespace() || c == ',' || c == ':' || c == '=')
            .find(|w| w.starts_with("--"))
            .unwrap_or_default()
            .to_owned();
        Self { flag, message }
    }
}
