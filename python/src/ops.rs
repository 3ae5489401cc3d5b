//! The calls both clients make, as futures over the Rust SDK: `Client` waits for them with
//! the GIL released, `AsyncClient` hands them to asyncio. Each owns what it needs (the
//! SDK client is an `Arc`; buffers are exports held until the call ends).

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use rasa_client::{Client as Sdk, Error, ProblemCode};

use crate::buffer::Out;
use crate::errors::{to_py, IntoPy};
use crate::registered::RegisteredBuffer;
use crate::types::{Descriptor, Meta, Object, ObjectList};

/// One key's result in a batch: a value, `None` for a miss, or the exception (returned,
/// not raised, so the other keys' results are not lost).
pub(crate) enum Each<T> {
    Value(T),
    Miss,
    Failed(PyErr),
}

impl<T> From<Result<T, Error>> for Each<T> {
    fn from(r: Result<T, Error>) -> Self {
        match r {
            Ok(v) => Self::Value(v),
            Err(e) if e.code() == Some(ProblemCode::NotFound) => Self::Miss,
            Err(e) => Self::Failed(to_py(e)),
        }
    }
}

impl<'py, T: IntoPyObject<'py>> IntoPyObject<'py> for Each<T> {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Self::Value(v) => v.into_bound_py_any(py),
            Self::Miss => Ok(py.None().into_bound(py)),
            Self::Failed(e) => Ok(e.into_value(py).into_bound(py).into_any()),
        }
    }
}

pub(crate) async fn put(
    sdk: Sdk,
    key: String,
    data: Bytes,
    content_type: Option<String>,
) -> PyResult<Descriptor> {
    sdk.put_typed(&key, data, content_type.as_deref())
        .await
        .map(Descriptor)
        .py()
}

/// `put_many`: one result per item, a descriptor or the exception (returned, not raised).
pub(crate) async fn put_many(
    sdk: Sdk,
    items: Vec<(String, Bytes)>,
) -> PyResult<Vec<Each<Descriptor>>> {
    let refs: Vec<(&str, Bytes)> = items.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let all = sdk.many().put(&refs).await.py()?;
    Ok(all
        .into_iter()
        .map(|r| match r {
            Ok(d) => Each::Value(Descriptor(d)),
            Err(p) => Each::Failed(to_py(Error::Problem(p))),
        })
        .collect())
}

/// `delete_many`: one result per key, `None` or the exception (returned, not raised).
pub(crate) async fn delete_many(sdk: Sdk, keys: Vec<String>) -> PyResult<Vec<Each<()>>> {
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let all = sdk.many().delete(&refs).await.py()?;
    Ok(all
        .into_iter()
        .map(|r| match r {
            Ok(()) => Each::Miss, // `None`: deleted
            Err(p) => Each::Failed(to_py(Error::Problem(p))),
        })
        .collect())
}

/// `exists_many`: one result per key, a bool or the exception (returned, not raised).
pub(crate) async fn exists_many(sdk: Sdk, keys: Vec<String>) -> PyResult<Vec<Each<bool>>> {
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let all = sdk.many().exists(&refs).await.py()?;
    Ok(all
        .into_iter()
        .map(|r| match r {
            Ok(there) => Each::Value(there),
            Err(p) => Each::Failed(to_py(Error::Problem(p))),
        })
        .collect())
}

pub(crate) async fn get(sdk: Sdk, key: String, version: Option<String>) -> PyResult<Object> {
    let got = match &version {
        Some(v) => sdk.versions().get(&key, v).await,
        None => sdk.get(&key).await,
    }
    .py()?;
    Ok(Object::of(key, got))
}

/// A conditional `put`: `if_match` an ETag, or `if_none_match="*"` (create only).
pub(crate) async fn put_if(
    sdk: Sdk,
    key: String,
    data: Bytes,
    content_type: Option<String>,
    condition: rasa_client::Condition,
) -> PyResult<Descriptor> {
    sdk.versions()
        .put_if(&key, data, content_type.as_deref(), condition)
        .await
        .map(Descriptor)
        .py()
}

/// `get_range_into`: bytes `start..end` of `key` into the front of `out`.
pub(crate) async fn get_range_into(
    sdk: Sdk,
    key: String,
    start: u64,
    end: u64,
    out: Out,
) -> PyResult<u64> {
    if end < start {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "the range ends ({end}) before it starts ({start})"
        )));
    }
    let (r, _out) = sdk.get_range_into(&key, start..end, out).await;
    r.map(|w| w.length).py()
}

pub(crate) async fn get_range(sdk: Sdk, key: String, start: u64, end: u64) -> PyResult<Object> {
    if end < start {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "the range ends ({end}) before it starts ({start})"
        )));
    }
    let got = sdk.get_range(&key, start..end).await.py()?;
    Ok(Object::of(key, got))
}

pub(crate) async fn get_into(sdk: Sdk, key: String, out: Out) -> PyResult<u64> {
    let (r, _out) = sdk.get_into(&key, out).await;
    r.map(|w| w.length).py()
}

/// `get_into` a registered buffer: the value lands in it with no copy one-sided.
pub(crate) async fn get_registered(
    sdk: Sdk,
    key: String,
    reg: Py<RegisteredBuffer>,
) -> PyResult<u64> {
    let buf = reg.get().take()?;
    let (r, buf) = sdk.get_into(&key, buf).await;
    reg.get().put_back(buf);
    r.map(|w| w.length).py()
}

pub(crate) async fn get_many(sdk: Sdk, keys: Vec<String>) -> PyResult<Vec<Each<Object>>> {
    Ok(read_many(sdk, keys).await?.map(Each::from).collect())
}

/// `keys` read with the SDK's `get_many`: one result per key, each object named by its key.
async fn read_many(
    sdk: Sdk,
    keys: Vec<String>,
) -> PyResult<impl Iterator<Item = Result<Object, Error>>> {
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let all = sdk.many().get(&refs).await.py()?;
    Ok(all
        .into_iter()
        .zip(keys)
        .map(|(r, key)| r.map(|o| Object::of(key, o))))
}

/// `get_many` with a miss as the `NotFound` a single `get` raises (returned, not raised):
/// what `AsyncClient.get` calls for the reads one event-loop turn asked for together.
pub(crate) async fn get_batch(sdk: Sdk, keys: Vec<String>) -> PyResult<Vec<Each<Object>>> {
    Ok(read_many(sdk, keys)
        .await?
        .map(|r| match r {
            Ok(o) => Each::Value(o),
            Err(e) => Each::Failed(to_py(e)),
        })
        .collect())
}

/// `get_many_into` a registered buffer, key `i`'s value landing in `spans[i]`: in place,
/// no copy one-sided, the reads in flight together.
pub(crate) async fn get_many_registered(
    sdk: Sdk,
    keys: Vec<String>,
    reg: Py<RegisteredBuffer>,
    spans: Vec<std::ops::Range<usize>>,
) -> PyResult<Vec<Each<u64>>> {
    let buf = reg.get().take()?;
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let (r, buf) = buf.get_many_in(&sdk, &refs, &spans).await;
    reg.get().put_back(buf);
    let all = r.map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    Ok(all
        .into_iter()
        .map(|r| Each::from(r.map(|w| w.length)))
        .collect())
}

pub(crate) async fn get_many_into(
    sdk: Sdk,
    keys: Vec<String>,
    outs: Vec<Out>,
) -> PyResult<Vec<Each<u64>>> {
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let all = sdk.many().get_into(&refs, outs).await;
    Ok(all
        .into_iter()
        .map(|(r, _out)| Each::from(r.map(|w| w.length)))
        .collect())
}

pub(crate) async fn head(sdk: Sdk, key: String) -> PyResult<Meta> {
    sdk.head(&key).await.map(Meta::from).py()
}

pub(crate) async fn exists(sdk: Sdk, key: String) -> PyResult<bool> {
    match sdk.head(&key).await {
        Ok(_) => Ok(true),
        Err(e) if e.code() == Some(ProblemCode::NotFound) => Ok(false),
        Err(e) => Err(to_py(e)),
    }
}

pub(crate) async fn list(
    sdk: Sdk,
    prefix: String,
    after: Option<String>,
    limit: usize,
) -> PyResult<ObjectList> {
    sdk.list(&prefix, after.as_deref(), limit)
        .await
        .map(ObjectList::from)
        .py()
}

pub(crate) async fn delete(sdk: Sdk, key: String) -> PyResult<()> {
    sdk.delete(&key).await.py()
}

pub(crate) async fn resolve(sdk: Sdk, key: String) -> PyResult<Descriptor> {
    sdk.resolve(&key).await.map(Descriptor).py()
}

/// Where each key's value lands in one buffer of `len` bytes: at `offsets[i]`, for
/// `lengths[i]` bytes when given (any order, no overlaps), else up to the next offset
/// (offsets non-decreasing).
pub(crate) fn spans(
    keys: usize,
    len: usize,
    offsets: Vec<usize>,
    lengths: Option<Vec<usize>>,
) -> PyResult<Vec<std::ops::Range<usize>>> {
    use pyo3::exceptions::PyValueError;
    if offsets.len() != keys {
        return Err(PyValueError::new_err(format!(
            "{keys} keys but {} offsets: one offset per key",
            offsets.len()
        )));
    }
    match lengths {
        Some(lengths) if lengths.len() != keys => Err(PyValueError::new_err(format!(
            "{keys} keys but {} lengths: one length per key",
            lengths.len()
        ))),
        Some(lengths) => Ok(offsets
            .iter()
            .zip(lengths)
            .map(|(&s, n)| s..s.saturating_add(n))
            .collect()),
        None => {
            if let Some(i) = (1..keys).find(|&i| offsets[i] < offsets[i - 1]) {
                return Err(PyValueError::new_err(format!(
                    "offsets must not decrease (non-decreasing, unless lengths=[...] are given); offset {i} is {}",
                    offsets[i]
                )));
            }
            let ends = offsets
                .iter()
                .skip(1)
                .copied()
                .chain([len.max(offsets.last().copied().unwrap_or(0))]);
            Ok(offsets.iter().zip(ends).map(|(&s, e)| s..e).collect())
        }
    }
}

/// The regions `get_many_into` fills: one buffer per key (no two overlapping), or one
/// buffer cut at `offsets` (for `lengths` bytes each when given).
pub(crate) fn regions(
    keys: usize,
    out: &Bound<'_, PyAny>,
    offsets: Option<Vec<usize>>,
    lengths: Option<Vec<usize>>,
) -> PyResult<Vec<Out>> {
    use pyo3::exceptions::PyValueError;
    let single = pyo3::types::PyMemoryView::from(out).is_ok();
    match offsets {
        Some(_) if !single => Err(PyValueError::new_err(
            "with offsets, out must be one buffer",
        )),
        Some(offsets) => {
            let whole = Out::of(out)?;
            let spans = spans(keys, whole.capacity(), offsets, lengths)?;
            let outs = whole.cut(&spans)?;
            Out::disjoint(&outs)?;
            Ok(outs)
        }
        None if lengths.is_some() => Err(PyValueError::new_err(
            "lengths=[...] goes with offsets=[...]",
        )),
        None if single => Err(PyValueError::new_err(
            "one buffer for several keys needs offsets=[...] (where each key's value starts)",
        )),
        None => {
            let items = out.try_iter()?.collect::<PyResult<Vec<_>>>()?;
            if items.len() != keys {
                return Err(PyValueError::new_err(format!(
                    "{keys} keys but {} buffers: one buffer per key",
                    items.len()
                )));
            }
            let outs = items.iter().map(Out::of).collect::<PyResult<Vec<_>>>()?;
            Out::disjoint(&outs)?;
            Ok(outs)
        }
    }
}
