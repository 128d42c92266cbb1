//! burn-fusion's dry band on burn 0.22 (`burn022::fused`): reads a band request as JSON on stdin,
//! writes the band as JSON on stdout. Built with this crate's feature `fusion`, which burn 0.22
//! applies to the whole build, for `highwater fit` to run fused networks through.

use std::io::Read;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut text = String::new();
    let answered = std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_str(&text).map_err(|e| format!("the request: {e}")))
        .and_then(|request| burn022::fused::answer(&request).map_err(|e| e.to_string()))
        .and_then(|band| serde_json::to_string(&band).map_err(|e| e.to_string()));
    match answered {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}
