//! Flotilla operator `service-dns` (being built: see its issue).
