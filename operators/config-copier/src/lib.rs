//! Flotilla operator `config-copier` (being built: see its issue).
