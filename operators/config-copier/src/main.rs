fn main() -> std::process::ExitCode {
    eprintln!("config-copier is not implemented yet");
    std::process::ExitCode::FAILURE
}
