//! Tool names: the seed names (`fs:read_file`) and the provider wire names (`fs__read_file`).
//!
//! Providers accept only `[A-Za-z0-9_-]` in a tool's name, so the namespace separator `:` is
//! written `__` on the wire. The mapping is one to one: a namespace and a name may not contain
//! `__` themselves, which [`check`] enforces for every tool a configuration declares.

/// The wire name of a seed name (`fs:read_file` → `fs__read_file`; a name without a namespace
/// is unchanged).
pub fn wire(name: &str) -> String {
    name.replacen(':', "__", 1)
}

/// The seed name of a wire name (`fs__read_file` → `fs:read_file`).
pub fn seed(wire: &str) -> String {
    wire.replacen("__", ":", 1)
}

/// Checks a seed name: `namespace:name` or `name`, each part of `[A-Za-z0-9_-]`, without `__`,
/// at most 64 characters on the wire (the providers' limit).
pub fn check(name: &str) -> Result<(), String> {
    let parts: Vec<&str> = name.split(':').collect();
    if parts.len() > 2 || parts.iter().any(|p| p.is_empty()) {
        return Err(format!(
            "`{name}`: expected `namespace:name` or `name`, each part non-empty"
        ));
    }
    for part in &parts {
        if let Some(c) = part
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
        {
            return Err(format!(
                "`{name}`: `{c}` is not allowed (letters, digits, `_` and `-` only)"
            ));
        }
        if part.contains("__") {
            return Err(format!(
                "`{name}`: `__` is reserved (it separates the namespace on the wire)"
            ));
        }
    }
    if wire(name).len() > 64 {
        return Err(format!("`{name}`: longer than 64 characters on the wire"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways() {
        for name in [
            "fs:read_file",
            "system:shell",
            "python:run_script",
            "deploy",
        ] {
            check(name).expect(name);
            assert_eq!(seed(&wire(name)), name);
        }
        assert_eq!(wire("fs:read_file"), "fs__read_file");
    }

    #[test]
    fn bad_names_are_refused_with_the_reason() {
        assert!(check("fs:read:file").unwrap_err().contains("namespace"));
        assert!(check("fs:read file")
            .unwrap_err()
            .contains("` ` is not allowed"));
        assert!(check("my__tool").unwrap_err().contains("reserved"));
        assert!(check(":x").is_err());
        assert!(check(&"a".repeat(70)).unwrap_err().contains("64"));
    }
}
