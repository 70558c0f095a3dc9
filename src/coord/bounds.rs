//! The bounds of the domain: the limits the validated types check and the default the
//! settings start from. A room of their own because the types, the lock recipe, the paging
//! arithmetic and the settings all read them, and none of those should import another for a
//! number.

/// Names are 1–200 characters of `[A-Za-z0-9._-]`, and not `.` or `..` (contract "Errors"): safe as
/// a single ZooKeeper path segment and as a Prometheus label value.
pub const MAX_NAME_LEN: usize = 200;

/// Default limit for a candidate's or proclaimed value: far below ZooKeeper's 1 MiB jute limit.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 64 * 1024;

/// More permits than any real semaphore needs; larger counts are a mistake (a negative number
/// through an unsigned field, a typo) and refused as `INVALID_ARGUMENT`.
pub const MAX_PERMITS: u32 = 10_000;
