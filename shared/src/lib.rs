//! The Flotilla operator runtime.
