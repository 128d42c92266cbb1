//! Keeping a dry run's expected panics (a refused page, on the device's threads) off the screen.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A refused page makes cubecl's server thread panic, as on the GPU, and every later use of the
/// unbacked buffer panics again (on the device's threads, cubecl's `DSD-*` and burn-fusion's
/// `DSU-*`, or in burn on a thread that trains, the caller's or one of a band's, where the dry
/// run catches it): expected, recorded as the run's death, and not worth a screenful of
/// messages. Panics anywhere else, or outside a dry run, print as usual.
pub(crate) fn quiet_device_threads() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let on_device = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("DSD-") || n.starts_with("DSU-"));
        if !on_device && IN_DRY_RUN.load(Ordering::Relaxed) == 0 {
            default(info);
        }
    }));
}

/// Dry runs under way. Process-wide, not per thread: a band trains its runs on threads of its
/// own (`situ::band`), and the command does nothing else meanwhile.
static IN_DRY_RUN: AtomicUsize = AtomicUsize::new(0);

/// Runs `f`, a dry run, with the panics it catches itself kept quiet.
pub(crate) fn quietly<T>(f: impl FnOnce() -> T) -> T {
    IN_DRY_RUN.fetch_add(1, Ordering::Relaxed);
    let out = f();
    IN_DRY_RUN.fetch_sub(1, Ordering::Relaxed);
    out
}
