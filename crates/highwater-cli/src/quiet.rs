//! Keeping a dry run's expected panics (a refused page, on the device's threads) off the screen.

/// A refused page makes cubecl's server thread panic, as on the GPU, and every later use of the
/// unbacked buffer panics again (on the device's threads, cubecl's `DSD-*` and burn-fusion's
/// `DSU-*`, or in burn on the caller's, where the
/// dry run catches it): expected, recorded as the run's death, and not worth a screenful of
/// messages. Panics anywhere else, or outside a dry run, print as usual.
pub(crate) fn quiet_device_threads() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let on_device = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("DSD-") || n.starts_with("DSU-"));
        if !on_device && !IN_DRY_RUN.with(|d| d.get()) {
            default(info);
        }
    }));
}

thread_local! {
    static IN_DRY_RUN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, a dry run, with the panics it catches itself kept quiet.
pub(crate) fn quietly<T>(f: impl FnOnce() -> T) -> T {
    IN_DRY_RUN.with(|d| d.set(true));
    let out = f();
    IN_DRY_RUN.with(|d| d.set(false));
    out
}
