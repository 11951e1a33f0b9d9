//! An `Invoke`'s arguments against a tool's input schema, as the registry
//! takes them: `validate::compile` (at announce), then
//! `validate::parse_arguments` (with the registry's default
//! `--max-arguments-bytes`) and `ArgumentValidator::check` (every call), and
//! the gRPC status a refusal becomes.
//!
//! Input: `schema NUL arguments`, both UTF-8. Without a NUL the whole input
//! is the arguments and the schema is empty ("any JSON object").
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolmesh_registry::catalog::validate::{self, MAX_VIOLATIONS};
use toolmesh_registry::{Config, RegistryError};

fuzz_target!(|data: &[u8]| {
    let (schema, arguments) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (&[][..], data),
    };
    let (Ok(schema), Ok(arguments)) = (std::str::from_utf8(schema), std::str::from_utf8(arguments))
    else {
        return;
    };

    if !arguments.is_empty() {
        let limit = arguments.len() - 1;
        assert!(matches!(
            validate::parse_arguments(arguments, limit),
            Err(RegistryError::ArgumentsTooLarge { .. })
        ));
    }

    let max_bytes = Config::default().max_arguments_bytes;
    let value = match validate::parse_arguments(arguments, max_bytes) {
        Ok(value) => value,
        Err(error) => {
            assert!(error.to_status().message().len() < 4096, "an unbounded error");
            return;
        }
    };
    let Ok(validator) = validate::compile(schema) else {
        return;
    };
    if let Err(violations) = validator.check(&value) {
        assert!(!violations.is_empty() && violations.len() <= MAX_VIOLATIONS);
        for violation in &violations {
            assert!(
                violation.pointer.is_empty() || violation.pointer.starts_with('/'),
                "not a JSON Pointer: {:?}",
                violation.pointer
            );
        }
        let status = RegistryError::ArgumentsInvalid {
            tool: "fuzz".into(),
            violations,
        }
        .to_status();
        assert!(status.message().len() + status.details().len() < 8192, "an unbounded error");
    }
});
