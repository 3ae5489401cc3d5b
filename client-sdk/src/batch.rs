//! Batches: many values stored (`POST /v1/batch/put`), many keys deleted
//! (`POST /v1/batch/delete`) or checked (`POST /v1/batch/exists`) in a request per batch,
//! not one per value. Against a cluster,
//! each owner gets the values it owns in its own batches; an owner that does not answer
//! has its values written one by one (each goes to the key's next choice, as a lone
//! `put` does).

use bytes::Bytes;
use futures_util::StreamExt;
use rasa_openapi::{
    DeleteBatchRequest, DeleteBatchResponse, Descriptor, DescriptorResult, ExistsBatchRequest,
    ExistsBatchResponse, Problem, PutBatchManifest, PutBatchResponse, BATCH_CONTENT_TYPE,
};

use crate::http::{Payload, Transport};
use crate::Error;

/// Most values the SDK sends in one put batch (the gateway's `--max-batch-keys` is 1000
/// by default).
pub const MAX_BATCH_VALUES: usize = 1000;
/// Most bytes of values the SDK sends in one put batch (a value larger than this goes in
/// a batch of its own); the gateway's `--max-batch-size` is 256 MiB by default.
pub const MAX_BATCH_BYTES: u64 = 64 << 20;
/// Most batches of one call in flight at once, per gateway.
const IN_FLIGHT: usize = 4;
/// Fewest bytes of values a batch is cut at when a call is cut into [`IN_FLIGHT`]
/// batches (see [`cut`]).
const MIN_CUT_BYTES: u64 = 1 << 20;

/// One result of a batch: what the gateway answered for that value or key alone.
pub type Each<T> = Result<T, Problem>;

/// A lone call's outcome as a batch result: a problem is that item's; anything else
/// fails the call.
fn lone<T>(r: Result<T, Error>) -> Result<Each<T>, Error> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(Error::Problem(p)) => Ok(Err(p)),
        Err(e) => Err(e),
    }
}

/// `results` when there is one per item of a batch of `sent` (`what`); else a protocol
/// error.
fn one_each<T>(results: Vec<T>, sent: usize, what: &str) -> Result<Vec<T>, Error> {
    match results.len() == sent {
        true => Ok(results),
        false => Err(Error::Protocol(format!(
            "{what} ({sent}) answered with {} results",
            results.len()
        ))),
    }
}

/// Values of these lengths cut into batches (index ranges) of at most
/// [`MAX_BATCH_VALUES`] values and of at most a quarter of all their bytes ([`IN_FLIGHT`]
/// batches), but no less than [`MIN_CUT_BYTES`] and no more than [`MAX_BATCH_BYTES`]:
/// batches in flight together overlap one's round trips and the gateway's work on each
/// value with another's bytes (256 values of 64 KiB went 26–30% faster in four batches
/// than in one, over HTTP and tcp, and 12–15% one-sided over shm; values large enough to
/// fill four batches of [`MAX_BATCH_BYTES`] are cut as before).
fn cut(lens: impl Iterator<Item = u64> + Clone) -> Vec<std::ops::Range<usize>> {
    let (total, count) = lens.clone().fold((0u64, 0), |(t, c), len| (t + len, c + 1));
    let most = total
        .div_ceil(IN_FLIGHT as u64)
        .clamp(MIN_CUT_BYTES, MAX_BATCH_BYTES);
    let (mut out, mut start, mut bytes) = (Vec::new(), 0, 0u64);
    for (i, len) in lens.enumerate() {
        if i > start && (i - start == MAX_BATCH_VALUES || bytes + len > most) {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += len;
    }
    if start < count {
        out.push(start..count);
    }
    out
}

/// `items` stored at this gateway, batch by batch (up to [`IN_FLIGHT`] at once).
async fn put_batches(
    node: &crate::client::Node,
    items: &[(&str, Bytes)],
) -> Result<Vec<Each<Descriptor>>, Error> {
    let lens = items.iter().map(|(_, v)| v.len() as u64);
    let answers: Vec<_> = futures_util::stream::iter(cut(lens))
        .map(|r| put_batch_on(node, &items[r]))
        .buffered(IN_FLIGHT)
        .collect()
        .await;
    let mut out = Vec::with_capacity(items.len());
    for a in answers {
        out.extend(a?);
    }
    Ok(out)
}

/// One batch stored at `node`: written one-sided when the fast path is on and the batch
/// is large enough to be worth a region ([`crate::onesided::ONE_SIDED_MIN_BYTES`]), else
/// (or when no region could be had, or a write failed: nothing was stored) over HTTP.
async fn put_batch_on(
    node: &crate::client::Node,
    items: &[(&str, Bytes)],
) -> Result<Vec<Each<Descriptor>>, Error> {
    for (k, _) in items {
        rasa_openapi::key::validate(k).map_err(|why| Error::invalid_key(k, &why))?;
    }
    let bytes: u64 = items.iter().map(|(_, v)| v.len() as u64).sum();
    if node.writes_one_sided(bytes) {
        match node.put_one_sided(items, None, false).await {
            Err(Error::FastPath(why)) if node.fast_path != crate::FastPath::Required => {
                tracing::debug!(%why, "one-sided write refused; the batch goes over HTTP");
            }
            done => return done,
        }
    }
    let out = put_batch(&node.http, items).await?;
    node.counters.wrote(
        crate::ReadPath::Http,
        out.iter().filter(|r| r.is_ok()).count(),
    );
    Ok(out)
}

/// One put batch: the manifest line, then the values; sent again after a `503`.
async fn put_batch(
    http: &Transport,
    items: &[(&str, Bytes)],
) -> Result<Vec<Each<Descriptor>>, Error> {
    for (k, _) in items {
        rasa_openapi::key::validate(k).map_err(|why| Error::invalid_key(k, &why))?;
    }
    let line = PutBatchManifest::of(items.iter().map(|(k, v)| (*k, v.len() as u64))).line();
    let mut parts = vec![Bytes::from(line)];
    parts.extend(items.iter().map(|(_, v)| v.clone()));
    let length: u64 = parts.iter().map(|p| p.len() as u64).sum();
    let mut url = format!("{}/v1{}/batch/put", http.endpoint, http.space);
    if http.lease_puts {
        url.push_str("?lease=true");
    }
    let resp = http
        .exchange(|progress| {
            let chunks =
                futures_util::stream::iter(parts.clone().into_iter().map(Ok::<_, std::io::Error>));
            let body = Payload::Once(Some(reqwest::Body::wrap_stream(chunks))).body(progress)?;
            Some(
                http.http
                    .post(&url)
                    .header(reqwest::header::CONTENT_TYPE, BATCH_CONTENT_TYPE)
                    .header(reqwest::header::CONTENT_LENGTH, length)
                    .body(body),
            )
        })
        .await;
    for (k, _) in items {
        http.descriptors.forget(k);
    }
    let batch: PutBatchResponse = http.decode(resp?).await?;
    Ok(
        one_each(batch.results, items.len(), "a put batch of values")?
            .into_iter()
            .map(DescriptorResult::into_result)
            .collect(),
    )
}

/// `keys` deleted at this gateway, batch by batch.
async fn delete_batches(http: &Transport, keys: &[&str]) -> Result<Vec<Each<()>>, Error> {
    let mut out = Vec::with_capacity(keys.len());
    for part in keys.chunks(MAX_BATCH_VALUES) {
        let body = DeleteBatchRequest {
            keys: part.iter().map(|k| k.to_string()).collect(),
        };
        let url = format!("{}/v1{}/batch/delete", http.endpoint, http.space);
        let resp = http.send(http.http.post(url).json(&body)).await;
        for k in part {
            http.descriptors.forget(k);
        }
        let batch: DeleteBatchResponse = http.decode(resp?).await?;
        out.extend(
            one_each(batch.results, part.len(), "a delete batch of keys")?
                .into_iter()
                .map(|r| r.error.map_or(Ok(()), Err)),
        );
    }
    Ok(out)
}

/// Whether each of `keys` is stored at this gateway, batch by batch.
async fn exists_batches(http: &Transport, keys: &[&str]) -> Result<Vec<Each<bool>>, Error> {
    let mut out = Vec::with_capacity(keys.len());
    for part in keys.chunks(MAX_BATCH_VALUES) {
        let body = ExistsBatchRequest {
            keys: part.iter().map(|k| k.to_string()).collect(),
        };
        let url = format!("{}/v1{}/batch/exists", http.endpoint, http.space);
        let batch: ExistsBatchResponse = http
            .decode(http.send(http.http.post(url).json(&body)).await?)
            .await?;
        out.extend(
            one_each(batch.results, part.len(), "an exists batch of keys")?
                .into_iter()
                .map(|r| r.error.map_or(Ok(r.exists), Err)),
        );
    }
    Ok(out)
}

impl crate::Many<'_> {
    /// Stores each `(key, value)` as its own version, in one request per batch of at most
    /// [`MAX_BATCH_VALUES`] values and [`MAX_BATCH_BYTES`] bytes, and of at most a quarter
    /// of the call's bytes or 1 MiB, whichever is more, up to 4 in flight: 256 values of
    /// 64 KiB go in four requests of 64, together. One result per item, in order: its
    /// descriptor, or the problem that kept that value alone from being stored (the
    /// others are stored). `Err` when a batch as a whole failed (not answered, refused).
    pub async fn put(&self, items: &[(&str, Bytes)]) -> Result<Vec<Each<Descriptor>>, Error> {
        let keys: Vec<&str> = items.iter().map(|(k, _)| *k).collect();
        let groups = match self.0.inner.topology().await {
            Some(t) => t.by_owner(&keys, false),
            None => None,
        };
        let Some(groups) = groups else {
            return put_batches(&self.0.inner, items).await;
        };
        let mut out: Vec<Option<Each<Descriptor>>> = items.iter().map(|_| None).collect();
        let asks = groups.into_iter().map(|(owner, idx)| async move {
            let sub: Vec<(&str, Bytes)> = idx.iter().map(|&i| items[i].clone()).collect();
            (idx, put_batches(&owner.inner, &sub).await)
        });
        for (idx, answer) in futures_util::future::join_all(asks).await {
            match answer {
                Ok(results) => idx
                    .into_iter()
                    .zip(results)
                    .for_each(|(i, r)| out[i] = Some(r)),
                Err(e) if e.is_unreachable() => {
                    for i in idx {
                        let (key, value) = &items[i];
                        out[i] = Some(lone(self.0.put(key, value.clone()).await)?);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out
            .into_iter()
            .map(|r| r.expect("every value answered"))
            .collect())
    }

    /// Deletes each key (an absent one too), in one request per batch of at most
    /// [`MAX_BATCH_VALUES`] keys. One result per key, in order.
    pub async fn delete(&self, keys: &[&str]) -> Result<Vec<Each<()>>, Error> {
        let Some(out) = crate::cluster::per_owner_write(self.0, keys, |c, sub| async move {
            delete_batches(&c.inner.http, &sub).await
        })
        .await
        else {
            return delete_batches(&self.0.inner.http, keys).await;
        };
        let mut done = Vec::with_capacity(keys.len());
        for (i, r) in out.into_iter().enumerate() {
            done.push(match r {
                Some(r) => r,
                None => lone(self.0.delete(keys[i]).await)?,
            });
        }
        Ok(done)
    }

    /// Whether each key has a current version, as the gateways' indexes say (memory and
    /// disk tier; no value is read, no lease taken, the origin not asked), in one request
    /// per batch of at most [`MAX_BATCH_VALUES`] keys and per owner. One result per key,
    /// in order (a problem for an invalid key).
    pub async fn exists(&self, keys: &[&str]) -> Result<Vec<Each<bool>>, Error> {
        let Some(out) = crate::cluster::per_owner(self.0, keys, |c, sub| async move {
            exists_batches(&c.inner.http, &sub).await
        })
        .await
        else {
            return exists_batches(&self.0.inner.http, keys).await;
        };
        // An owner that did not answer: its keys asked of this gateway, which answers for
        // the cluster.
        let missing: Vec<usize> = (0..keys.len()).filter(|&i| out[i].is_none()).collect();
        let asked: Vec<&str> = missing.iter().map(|&i| keys[i]).collect();
        let mut here = match asked.is_empty() {
            true => Vec::new(),
            false => exists_batches(&self.0.inner.http, &asked).await?,
        }
        .into_iter();
        Ok(out
            .into_iter()
            .map(|r| r.unwrap_or_else(|| here.next().expect("one answer per key asked")))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The number of values in each batch `n` values of `len` bytes are cut into.
    fn lens(n: usize, len: u64) -> Vec<usize> {
        cut(std::iter::repeat_n(len, n))
            .into_iter()
            .map(|r| r.len())
            .collect()
    }

    #[test]
    fn a_call_is_cut_into_four_batches_of_equal_bytes_between_the_bounds() {
        // 16 MiB of 64 KiB values: four batches of 4 MiB.
        assert_eq!(lens(256, 64 << 10), vec![64; 4]);
        // 256 MiB of 16 MiB values: four of 64 MiB.
        assert_eq!(lens(16, 16 << 20), vec![4; 4]);
        // 1 GiB: batches of 64 MiB at most.
        assert_eq!(lens(64, 16 << 20), vec![4; 16]);
        // Under 1 MiB a batch: 2 MiB in two, 512 KiB in one.
        assert_eq!(lens(32, 64 << 10), vec![16, 16]);
        assert_eq!(lens(8, 64 << 10), vec![8]);
        // A value over the bound goes alone; counts stay within MAX_BATCH_VALUES.
        assert_eq!(lens(3, 100 << 20), vec![1, 1, 1]);
        assert_eq!(lens(2500, 16), vec![1000, 1000, 500]);
        assert!(cut(std::iter::empty()).is_empty());
    }
}
