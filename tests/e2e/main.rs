//! End-to-end tests: the real gateway binary over real HTTP, the real fabric and a real
//! S3-compatible server.

mod api;
mod black_hole;
mod cluster;
mod cold;
mod concurrent;
mod config;
mod dashboard;
mod disk;
mod fabric_check;
mod fastpath;
mod faults;
mod footprint;
mod hardening;
mod into;
mod keys;
mod layers;
mod leases;
mod library;
mod limits;
mod misses;
mod namespaces;
mod objects;
mod providers;
mod race;
mod ranges;
mod review2;
mod s3;
mod security;
mod setup;
mod stream;
mod tls;
mod trust;
mod two_providers;
mod ui;
mod versions;
