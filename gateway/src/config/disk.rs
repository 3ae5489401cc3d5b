//! The disk tier's flags (`--disk DIR`, …): off unless a directory is given.

use crate::setting::SettingError;
use std::path::PathBuf;
use std::time::Duration;

use crate::store::disk::{Admit, DiskConfig};
use crate::units::{parse_duration, parse_size};

/// The disk tier's settings (flattened into [`super::Args`]).
#[derive(Debug, Clone, clap::Args)]
pub struct DiskArgs {
    /// A directory for the disk tier: values the memory policy evicts are written there
    /// instead of dropped, read back on a miss (without asking the origin), and recovered
    /// at start (every record validated; a tail torn by a crash is dropped). Off when
    /// not given: the gateway is memory only.
    #[arg(long, env = "RASA_DISK")]
    pub disk: Option<PathBuf>,

    /// Most bytes the disk tier keeps; when full it deletes its oldest values. Refused at
    /// start when the directory's file system has less room.
    #[arg(long, env = "RASA_DISK_SIZE", default_value = "10GiB", value_parser = parse_size)]
    pub disk_size: u64,

    /// When a value read from disk is admitted into memory again: `first-hit`,
    /// `second-hit` (the first read is served from disk), or `never`. A descriptor request
    /// always admits it (one-sided readers read memory only).
    #[arg(long, env = "RASA_DISK_ADMIT", value_enum, default_value = "first-hit")]
    pub disk_admit: Admit,

    /// Size of one segment file, the unit the disk tier deletes when full (a larger value
    /// gets a file of its own).
    #[arg(long, env = "RASA_DISK_SEGMENT_SIZE", default_value = "64MiB", value_parser = parse_size)]
    pub disk_segment_size: u64,

    /// At a clean shutdown, how long writing the values still only in memory to the disk
    /// tier may take (so a restart finds them too). `0`: write nothing more.
    #[arg(long, env = "RASA_DISK_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub disk_shutdown_timeout: Duration,
}

impl DiskArgs {
    /// Combinations that make no sense, with the reason.
    pub fn validate(&self) -> Result<(), SettingError> {
        if self.disk.is_none() {
            return Ok(());
        }
        if !(1 << 20..=1 << 30).contains(&self.disk_segment_size) {
            return Err(SettingError::said(
                "--disk-segment-size must be between 1MiB and 1GiB",
            ));
        }
        if self.disk_size < 2 * self.disk_segment_size {
            return Err(SettingError::said(format!(
                "--disk-size {} must hold at least two segments of --disk-segment-size {}",
                bytesize::ByteSize(self.disk_size),
                bytesize::ByteSize(self.disk_segment_size)
            )));
        }
        Ok(())
    }

    /// The default namespace's disk tier, when `--disk` is given.
    pub fn config(&self) -> Option<DiskConfig> {
        let dir = self.disk.clone()?;
        Some(DiskConfig {
            root: dir.clone(),
            dir,
            size: self.disk_size,
            segment_size: self.disk_segment_size,
            admit: self.disk_admit,
            recover: true,
        })
    }
}
