"""Boot a real Linux v9fs client under QEMU against our server."""
