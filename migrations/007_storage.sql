-- Storage: fewer index bytes per version row, an index the rebuild query can use, and lz4 TOAST
-- compression where the server has it.

-- lz4 instead of pglz for the large JSON values (the patch of a first version, checkpoint
-- documents, head documents): several times faster to compress and decompress, which is what
-- head reads and rebuilds pay for. The server must be built with lz4 (Aurora and RDS
-- PostgreSQL 14+ are; the embedded test server is not, so there the values stay pglz and the
-- migration still applies). SET COMPRESSION applies to values written from now on; existing
-- values keep pglz until rewritten, and reads handle both. Values under about 2 KB (most
-- patches) are not compressed at all, whatever the method. lz4 trades speed for ratio: on
-- text it often compresses somewhat less than pglz, so measure bytes on the target server
-- (bench/bench_store.py prints the method in use).
DO $$
BEGIN
  ALTER TABLE user_memory_snapshots
    ALTER COLUMN patch SET COMPRESSION lz4,
    ALTER COLUMN full_snapshot_content SET COMPRESSION lz4;
  ALTER TABLE user_memory_heads ALTER COLUMN document SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
  RAISE NOTICE 'lz4 is not available on this server: TOAST compression stays pglz';
END
$$;

-- idx_user_memory_snapshots_user_id (user_id) is covered by the unique index on
-- (user_id, version): any lookup by user_id alone uses that index's leading column.
DROP INDEX IF EXISTS idx_user_memory_snapshots_user_id;

-- The rebuild asks for the latest checkpoint at or below a version:
--   SELECT max(version) ... WHERE user_id = $1 AND is_full_snapshot AND version <= $2
-- An index on (user_id, created_at DESC) cannot answer that; one on (user_id, version) over
-- checkpoint rows only answers it with one descent, and holds one entry per checkpoint.
DROP INDEX IF EXISTS idx_user_memory_snapshots_checkpoints;
CREATE INDEX IF NOT EXISTS idx_user_memory_snapshots_checkpoints
  ON user_memory_snapshots (user_id, version) WHERE is_full_snapshot = TRUE;

-- idx_user_memory_snapshots_user_created_at (user_id, created_at DESC) stays: as_of asks for
--   SELECT max(version) ... WHERE user_id = $1 AND created_at <= $2
-- For a recent timestamp the planner walks (user_id, version) backwards and stops at the first
-- row old enough; for an old one it needs this index, or it reads every row of the user
-- (measured at 60 versions a user: 4 buffers with it, 62 without, and it grows with history).

-- toast_tuple_target is left at its default (about 2 KB). Measured with 100 users x 60
-- versions, bytes of history + heads against the default: documents of ~4.8 KiB +12% at 8160
-- (values that fit the target are no longer compressed at all), -2% at 4096; ~9 KiB -6% at 8160
-- (compressed documents fit inline), 0% at 4096; ~13 KiB 0% at either (compressed documents
-- are still larger than a page can take inline). No setting wins across document sizes.
