//! End-to-end tests: the real gateway binary over real HTTP.

mod api;
mod objects;
