package storage

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
)

// PGChunkSize is the size of one stored chunk of a file in PostgreSQL.
const PGChunkSize = 1 << 20

// PGFileStore keeps file bytes in PostgreSQL, in chunks of PGChunkSize: the
// embedded default, read by every process that reads the database.
type PGFileStore struct{ DB *DB }

var _ FileStore = (*PGFileStore)(nil)

// Put implements FileStore. The chunks are written in one transaction:
// an error, a limit passed or a reader that fails keeps nothing.
func (s *PGFileStore) Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.DB.Pool, func(tx pgx.Tx) error {
		buf := make([]byte, PGChunkSize)
		for seq := 0; ; seq++ {
			m, err := io.ReadFull(r, buf)
			if m > 0 {
				n += int64(m)
				if n > limit {
					return ErrFileTooLarge
				}
				if _, err := tx.Exec(ctx, `insert into file_chunks (store_key, seq, data) values ($1, $2, $3)`,
					key, seq, buf[:m]); err != nil {
					return fmt.Errorf("cannot store file chunk: %w", err)
				}
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				if seq == 0 && m == 0 {
					// An empty file is one empty chunk, so that Open
					// tells it from a key never stored.
					if _, err := tx.Exec(ctx, `insert into file_chunks (store_key, seq, data) values ($1, 0, '')`, key); err != nil {
						return fmt.Errorf("cannot store file chunk: %w", err)
					}
				}
				return nil
			}
			if err != nil {
				return fmt.Errorf("cannot read file: %w", err)
			}
		}
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Open implements FileStore: the chunks are read one at a time as the
// reader is read, so a download holds one chunk in memory.
func (s *PGFileStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	var chunks int
	if err := s.DB.Pool.QueryRow(ctx, `select count(*) from file_chunks where store_key = $1`, key).Scan(&chunks); err != nil {
		return nil, fmt.Errorf("cannot open file: %w", err)
	}
	if chunks == 0 {
		return nil, ErrNotFound
	}
	return &pgChunkReader{ctx: ctx, s: s, key: key, chunks: chunks}, nil
}

type pgChunkReader struct {
	ctx    context.Context
	s      *PGFileStore
	key    string
	chunks int
	next   int
	cur    []byte
}

func (r *pgChunkReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.next >= r.chunks {
			return 0, io.EOF
		}
		if err := r.s.DB.Pool.QueryRow(r.ctx, `select data from file_chunks where store_key = $1 and seq = $2`,
			r.key, r.next).Scan(&r.cur); err != nil {
			return 0, fmt.Errorf("cannot read file chunk: %w", err)
		}
		r.next++
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *pgChunkReader) Close() error { r.cur = nil; r.next = r.chunks; return nil }

// Delete implements FileStore.
func (s *PGFileStore) Delete(ctx context.Context, key string) error {
	if _, err := s.DB.Pool.Exec(ctx, `delete from file_chunks where store_key = $1`, key); err != nil {
		return fmt.Errorf("cannot delete file: %w", err)
	}
	return nil
}
