//! The static table of built-in resources the apiserver serves.
