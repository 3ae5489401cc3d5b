//! Tests of [`super`].

use super::*;

fn parse(args: &[&str]) -> Result<Args, String> {
    let a = Args::try_parse_from(std::iter::once("rasa-gateway").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    a.validate().map_err(|e| e.to_string())?;
    Ok(a)
}

#[test]
fn defaults_are_valid() {
    let a = parse(&[]).unwrap();
    assert_eq!(a.memory, 1 << 30);
    assert_eq!(a.arena_size, 64 << 20);
    assert_eq!(a.lease, Duration::from_secs(10));
    assert_eq!(a.listen.to_string(), "127.0.0.1:8080");
}

#[test]
fn human_units_parse() {
    let a = parse(&[
        "--memory",
        "2GiB",
        "--arena-size",
        "1MiB",
        "--lease",
        "250ms",
    ])
    .unwrap();
    assert_eq!(a.memory, 2 << 30);
    assert_eq!(a.arena_size, 1 << 20);
    assert_eq!(a.lease, Duration::from_millis(250));
}

#[test]
fn bad_values_and_combinations_are_refused_in_one_line() {
    for (args, needle) in [
        (&["--memory", "lots"][..], "--memory"),
        (&["--lease", "soon"], "--lease"),
        (&["--arena-size", "2GiB"], "--arena-size"),
        (&["--arena-size", "1KiB"], "minimum"),
        (&["--max-object-size", "4GiB"], "--max-object-size"),
        (&["--lease", "0s"], "--lease"),
        (&["--lease", "2h"], "--lease"),
        (&["--max-batch-keys", "0"], "--max-batch-keys"),
        (
            &["--max-concurrent-requests", "0"],
            "--max-concurrent-requests",
        ),
        (&["--max-header-size", "1MiB"], "--max-header-size"),
        (&["--header-timeout", "0s"], "--header-timeout"),
        (&["--tls-cert", "c.pem"], "--tls-key"),
        (&["--origin", "http://bucket"], "s3://"),
        (&["--origin", "s3://B"], "bucket"),
        (&["--write-policy", "write-through"], "--origin"),
        (&["--s3-endpoint", "http://x"], "--origin"),
    ] {
        let err = parse(args).unwrap_err();
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn block_sizes_are_zero_or_powers_of_two_in_range() {
    for ok in ["0", "4KiB", "64KiB", "16MiB"] {
        assert!(parse(&["--block-size", ok]).is_ok(), "{ok}");
    }
    for bad in ["1KiB", "48KiB", "32MiB"] {
        let e = parse(&["--block-size", bad]).unwrap_err();
        assert!(e.contains("--block-size"), "{bad}: {e}");
    }
}
