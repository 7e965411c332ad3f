fn main() -> std::process::ExitCode {
    eprintln!("service-dns is not implemented yet");
    std::process::ExitCode::FAILURE
}
