//! The module's version is the package's: `build.rs` reads `echomq/VERSION` (the one place,
//! docs/compatibility.md "Versions") and writes `release.rs`, which `lib.rs` includes. MODULE LIST
//! shows a module's version as one integer; Valkey's modules number theirs major·10000 +
//! minor·100 + patch, and so does trafikey (0.2.0 is 200). `build.rs` compiles this file too.

/// The largest minor or patch number the encoding holds.
pub const PART_MAX: i32 = 99;
/// The largest major number whose encoding fits MODULE LIST's int.
pub const MAJOR_MAX: i32 = i32::MAX / 10_000 - 1;

/// Pure: `MAJOR.MINOR.PATCH` (decimal digits, minor and patch at most 99) → MODULE LIST's
/// number, or why the text is not such a version.
pub fn module_number(dotted: &str) -> Result<i32, String> {
    let parts: Vec<&str> = dotted.split('.').collect();
    let [major, minor, patch] = parts.as_slice() else {
        return Err(format!("{dotted:?} is not MAJOR.MINOR.PATCH"));
    };
    let part = |text: &str, max: i32| -> Result<i32, String> {
        let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        match text.parse::<i32>() {
            Ok(n) if digits && n <= max => Ok(n),
            _ => Err(format!(
                "{dotted:?}: {text:?} is not a number from 0 to {max}"
            )),
        }
    };
    Ok(part(major, MAJOR_MAX)? * 10_000 + part(minor, PART_MAX)? * 100 + part(patch, PART_MAX)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_a_version_as_valkey_modules_do() {
        assert_eq!(module_number("0.2.0"), Ok(200));
        assert_eq!(module_number("1.2.3"), Ok(10_203));
        assert_eq!(module_number("0.0.0"), Ok(0));
        assert_eq!(module_number("12.99.99"), Ok(129_999));
        assert_eq!(
            module_number(&format!("{MAJOR_MAX}.99.99")),
            Ok(MAJOR_MAX * 10_000 + 9_999)
        );
    }

    #[test]
    fn refuses_what_the_number_cannot_say() {
        for bad in [
            "",
            "1",
            "1.2",
            "1.2.3.4",
            "0.100.0",
            "0.1.100",
            "1.2.x",
            "1.2.-3",
            "+1.2.3",
            "1. 2.3",
            "0.2.0rc1",
            "214748.0.0",
        ] {
            assert!(module_number(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(
            module_number("0.100.0"),
            Err("\"0.100.0\": \"100\" is not a number from 0 to 99".into())
        );
    }
}
