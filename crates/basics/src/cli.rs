//! How the project's command-line programs end, alike: the exit status of a run, and its error
//! written once with every cause.

use std::error::Error;
use std::io::ErrorKind;
use std::ops::Deref;
use std::process::ExitCode;

/// The exit status of a command whose run ended in `result` (an `anyhow::Result`, or any error
/// that derefs to `dyn Error`): success; success too when the reader of its output left
/// (`highwater simulate --json | head -1`: not an error); otherwise failure, with `error: …` and
/// then `  caused by: …` for each cause in its chain, once each, on stderr.
pub fn exit_code<E>(result: Result<(), E>) -> ExitCode
where
    E: Deref<Target = dyn Error + Send + Sync + 'static>,
{
    let Err(e) = result else {
        return ExitCode::SUCCESS;
    };
    let top: &(dyn Error + 'static) = &*e;
    let chain = || std::iter::successors(Some(top), |&c| c.source());
    let broken_pipe = chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == ErrorKind::BrokenPipe)
    });
    if broken_pipe {
        return ExitCode::SUCCESS;
    }
    eprintln!("error: {}", &*e);
    for cause in chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("cannot write")
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    type Boxed = Box<dyn Error + Send + Sync>;

    #[test]
    fn a_reader_that_left_is_success_anywhere_in_the_chain_and_other_errors_fail() {
        let pipe = || std::io::Error::from(ErrorKind::BrokenPipe);
        assert_eq!(exit_code::<Boxed>(Ok(())), ExitCode::SUCCESS);
        assert_eq!(exit_code::<Boxed>(Err(pipe().into())), ExitCode::SUCCESS);
        assert_eq!(
            exit_code::<Boxed>(Err(Wrapped(pipe()).into())),
            ExitCode::SUCCESS
        );
        let denied = std::io::Error::from(ErrorKind::PermissionDenied);
        assert_eq!(
            exit_code::<Boxed>(Err(Wrapped(denied).into())),
            ExitCode::FAILURE
        );
    }
}
