//! Disk tier engines for Rasa, measured: foyer 0.22's block engine vs append-only segment
//! files scanned at start. `disk-eval foyer|segments N SIZE DIR`.
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Instant;

use foyer::{BlockEngineConfig, DeviceBuilder, FsDeviceBuilder, HybridCache, HybridCacheBuilder, HybridCachePolicy, RecoverMode};

fn value(i: u64, size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size];
    for (j, b) in v.iter_mut().enumerate() {
        *b = (i as usize * 31 + j) as u8;
    }
    v
}

async fn open_foyer(dir: &str, cap: usize) -> anyhow::Result<HybridCache<u64, Vec<u8>>> {
    let device = FsDeviceBuilder::new(dir).with_capacity(cap).build()?;
    Ok(HybridCacheBuilder::new()
        .with_policy(HybridCachePolicy::WriteOnInsertion)
        .memory(16 << 20)
        .with_weighter(|_k, v: &Vec<u8>| v.len())
        .storage()
        .with_engine_config(BlockEngineConfig::new(device).with_block_size(64 << 20).with_buffer_pool_size(std::env::var("POOL").ok().and_then(|p| p.parse().ok()).unwrap_or(16 << 20)))
        .with_recover_mode(RecoverMode::Quiet)
        .build()
        .await?)
}

async fn foyer_run(n: u64, size: usize, dir: &str) -> anyhow::Result<()> {
    let cap = ((n as usize * (size + 256)) * 2).max(512 << 20);
    let c = open_foyer(dir, cap).await?;
    let t = Instant::now();
    for i in 0..n {
        c.insert(i, value(i, size));
    }
    c.close().await?;
    let write = t.elapsed();
    let t = Instant::now();
    let c = open_foyer(dir, cap).await?;
    let recover = t.elapsed();
    let t = Instant::now();
    let (mut hits, mut bytes) = (0u64, 0usize);
    for i in 0..n {
        if let Some(e) = c.get(&i).await? {
            assert_eq!(e.value()[..], value(i, size)[..]);
            hits += 1;
            bytes += e.value().len();
        }
    }
    let read = t.elapsed();
    println!("foyer n={n} size={size}: write {:?} ({:.0} MB/s), recover {:?}, read {hits} back in {:?} ({:.0} MB/s)",
        write, (n as f64 * size as f64) / write.as_secs_f64() / 1e6, recover, read, bytes as f64 / read.as_secs_f64() / 1e6);
    c.close().await?;
    Ok(())
}

const SEG: u64 = 64 << 20;
const HDR: usize = 4 + 8 + 4 + 8; // magic, key, len, xxh3

fn segments_run(n: u64, size: usize, dir: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let t = Instant::now();
    let (mut seg, mut off) = (0u32, 0u64);
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(format!("{dir}/{seg:08}.seg"))?);
    for i in 0..n {
        let v = value(i, size);
        let rec = (HDR + size) as u64;
        if off + rec > SEG {
            f.flush()?;
            f.get_ref().sync_data()?;
            seg += 1;
            off = 0;
            f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(format!("{dir}/{seg:08}.seg"))?);
        }
        f.write_all(&0x5241_5341u32.to_le_bytes())?;
        f.write_all(&i.to_le_bytes())?;
        f.write_all(&(size as u32).to_le_bytes())?;
        f.write_all(&xxhash_rust::xxh3::xxh3_64(&v).to_le_bytes())?;
        f.write_all(&v)?;
        off += rec;
    }
    f.flush()?;
    f.get_ref().sync_data()?;
    let write = t.elapsed();
    // Recovery: every record validated (its payload hashed), the index rebuilt.
    let t = Instant::now();
    let mut index: std::collections::HashMap<u64, (u32, u64, u32)> = std::collections::HashMap::with_capacity(n as usize);
    let mut buf = Vec::new();
    for s in 0..=seg {
        let mut r = std::io::BufReader::with_capacity(4 << 20, std::fs::File::open(format!("{dir}/{s:08}.seg"))?);
        let mut at = 0u64;
        loop {
            let mut h = [0u8; HDR];
            if r.read_exact(&mut h).is_err() { break; }
            let key = u64::from_le_bytes(h[4..12].try_into()?);
            let len = u32::from_le_bytes(h[12..16].try_into()?);
            let sum = u64::from_le_bytes(h[16..24].try_into()?);
            buf.resize(len as usize, 0);
            if r.read_exact(&mut buf).is_err() || xxhash_rust::xxh3::xxh3_64(&buf) != sum { break; } // torn tail
            index.insert(key, (s, at + HDR as u64, len));
            at += (HDR + len as usize) as u64;
        }
    }
    let recover = t.elapsed();
    let t = Instant::now();
    let mut files: Vec<std::fs::File> = (0..=seg).map(|s| std::fs::File::open(format!("{dir}/{s:08}.seg")).unwrap()).collect();
    let mut bytes = 0usize;
    for i in 0..n {
        let (s, at, len) = index[&i];
        let f = &mut files[s as usize];
        f.seek(SeekFrom::Start(at))?;
        buf.resize(len as usize, 0);
        f.read_exact(&mut buf)?;
        assert_eq!(buf[..], value(i, size)[..]);
        bytes += buf.len();
    }
    let read = t.elapsed();
    println!("segments n={n} size={size}: write {:?} ({:.0} MB/s), recover {:?} (index {} entries, ~{} B each), read back in {:?} ({:.0} MB/s)",
        write, (n as f64 * size as f64) / write.as_secs_f64() / 1e6, recover, index.len(),
        (index.capacity() * (8 + 16 + 8)) / index.len().max(1), read, bytes as f64 / read.as_secs_f64() / 1e6);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().collect();
    let (n, size, dir) = (a[2].parse()?, a[3].parse()?, a[4].as_str());
    match a[1].as_str() {
        "foyer" => foyer_run(n, size, dir).await,
        _ => segments_run(n, size, dir),
    }
}
