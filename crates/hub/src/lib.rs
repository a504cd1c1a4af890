//! Model catalog and downloads: plumb pull.
