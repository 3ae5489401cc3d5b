//! End-to-end tests: the real gateway binary over real HTTP and the real fabric.

mod api;
mod fastpath;
mod objects;
mod race;
