//! What the second hostile review got through (issue 43), one file per finding group: the
//! disk tier's files (links, foreign files, modes), the S3 door's refusals and bucket
//! rights, series of removed namespaces, over-limit uploads answered to the SDKs.

mod disk_files;
mod early_answers;
mod s3_door;
