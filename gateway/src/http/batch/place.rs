//! Where a value of a batch goes, checked before its bytes are read: shared by the put
//! batch and the one-sided upload region.

use rasa_openapi::{ClusterMember, PutBatchItem};

use crate::http::objects::check_content_type;
use crate::http::{fanout, ApiError, AppState};
use crate::key;

/// Where `item` is stored: here (`None`), at another member, or nowhere (why).
pub(crate) fn place(
    st: &AppState,
    item: &PutBatchItem,
    hopped: bool,
) -> Result<Option<ClusterMember>, ApiError> {
    key::validate(&item.key)?;
    if let Some(ct) = &item.content_type {
        check_content_type(ct)?;
    }
    if item.length > st.config.limits.max_object_size {
        return Err(ApiError::PayloadTooLarge {
            limit: st.config.limits.max_object_size,
        });
    }
    fanout::write_owner(st, &item.key, hopped)
}
