//! Loading libfabric at run time: a missing or wrong library is an error that names it
//! and the fix, and loading changes none of the process's signal handlers (Debian's
//! libfabric pulls in PSM, whose constructors install their own). In a test binary of its
//! own, so that nothing has loaded the library before.

use rasa_fastpath::library;

extern "C" fn marker(_: libc::c_int) {}

#[test]
fn loading_keeps_signal_handlers_and_a_missing_library_is_named() {
    let e = library::try_open("/nonexistent/libfabric.so.1").expect_err("fails");
    assert!(
        e.contains("/nonexistent/libfabric.so.1: no such file"),
        "{e}"
    );
    assert!(e.contains(library::ENV), "{e}");
    let e = library::try_open("/etc/hostname").expect_err("not a library");
    assert!(e.contains("/etc/hostname"), "{e}");

    let signals = [libc::SIGINT, libc::SIGTERM, libc::SIGSEGV, libc::SIGABRT];
    // One value, installed and compared: `marker as …` may give another address each time
    // it is written (an optimised build may keep a copy of the function per codegen unit).
    let installed = marker as *const () as libc::sighandler_t;
    // SAFETY: a handler that does nothing, installed in this test process only.
    let before: Vec<_> = signals
        .iter()
        .map(|s| unsafe { libc::signal(*s, installed) })
        .collect();
    let loaded = library::load().expect("the system's libfabric loads");
    assert!(loaded.path.contains("libfabric"), "{}", loaded.path);
    for (s, old) in signals.iter().zip(before) {
        // SAFETY: reading back (by replacing) and restoring the earlier handler.
        let now = unsafe { libc::signal(*s, old) };
        assert_eq!(now, installed, "signal {s} was taken over");
    }
    assert!(library::loaded().is_some());
}
