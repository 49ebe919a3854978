//! The environment variables that choose among a few settings (`RANKWISE_PIN`,
//! `RANKWISE_MPI_SHM`, …): one reading for all of them, and one error for a value that is none
//! of a variable's settings. A typo (`RANKWISE_MPI_SHM=requre`) must not silently mean the
//! default; the run stops before it starts, naming the variable, its value and what it takes.

use std::env::VarError;

use crate::error::{Error, Result};

/// One setting of a variable: the values that ask for it (lowercase; a value is compared after
/// trimming and lowercasing), what it means (for the error), and what it is.
pub(crate) struct Choice<T> {
    pub(crate) values: &'static [&'static str],
    pub(crate) means: &'static str,
    pub(crate) value: T,
}

/// The spellings of "on" that every yes/no variable takes.
pub(crate) const ON: &[&str] = &["1", "on", "true", "yes"];
/// The spellings of "off".
pub(crate) const OFF: &[&str] = &["0", "off", "false", "no"];

/// `name`'s setting among `choices`: `None` when the variable is unset or empty (the caller's
/// default), an [`Error::Setting`] when it holds anything else that is not one of them.
pub(crate) fn read<T: Copy>(name: &'static str, choices: &[Choice<T>]) -> Result<Option<T>> {
    match std::env::var(name) {
        Err(VarError::NotPresent) => Ok(None),
        Err(VarError::NotUnicode(v)) => Err(refused(name, &v.to_string_lossy(), choices)),
        Ok(v) => parse(name, &v, choices),
    }
}

/// [`read`]'s judgement of `value`, the value of `name`.
pub(crate) fn parse<T: Copy>(
    name: &'static str,
    value: &str,
    choices: &[Choice<T>],
) -> Result<Option<T>> {
    let v = value.trim().to_ascii_lowercase();
    if v.is_empty() {
        return Ok(None);
    }
    choices
        .iter()
        .find(|c| c.values.contains(&v.as_str()))
        .map(|c| Some(c.value))
        .ok_or_else(|| refused(name, value, choices))
}

/// A yes/no variable ([`ON`], [`OFF`]); `default` when unset or empty.
pub(crate) fn flag(name: &'static str, default: bool) -> Result<bool> {
    Ok(read(name, &FLAG)?.unwrap_or(default))
}

/// The settings of a yes/no variable.
pub(crate) const FLAG: [Choice<bool>; 2] = [
    Choice {
        values: ON,
        means: "on",
        value: true,
    },
    Choice {
        values: OFF,
        means: "off",
        value: false,
    },
];

fn refused<T>(name: &'static str, value: &str, choices: &[Choice<T>]) -> Error {
    let accepted: Vec<String> = choices
        .iter()
        .map(|c| {
            let values: Vec<String> = c.values.iter().map(|v| format!("`{v}`")).collect();
            format!("{} ({})", values.join("/"), c.means)
        })
        .collect();
    Error::Setting {
        name,
        value: value.to_string(),
        accepted: accepted.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_flag_reads_as_its_setting_whatever_its_case_and_spaces() {
        for (value, want) in [
            ("1", true),
            ("on", true),
            (" TRUE ", true),
            ("Yes", true),
            ("0", false),
            ("off\n", false),
            ("False", false),
            ("NO", false),
        ] {
            let got = parse("RANKWISE_PIN", value, &FLAG);
            assert!(
                matches!(got, Ok(Some(w)) if w == want),
                "{value:?}: {got:?}"
            );
        }
        assert!(matches!(parse("RANKWISE_PIN", " ", &FLAG), Ok(None)));
    }

    #[test]
    fn a_value_that_is_no_setting_is_an_error_naming_the_variable_the_value_and_the_settings() {
        for value in ["2", "yess", "enable", "o n", "-1"] {
            let e = parse("RANKWISE_PIN", value, &FLAG).expect_err(value);
            let text = e.to_string();
            assert!(
                text.contains(&format!("RANKWISE_PIN={value:?}"))
                    && text.contains("`1`/`on`/`true`/`yes` (on)")
                    && text.contains("`0`/`off`/`false`/`no` (off)"),
                "{text}"
            );
            assert!(matches!(
                e,
                Error::Setting {
                    name: "RANKWISE_PIN",
                    ..
                }
            ));
        }
    }
}
