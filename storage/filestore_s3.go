package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config configures an S3-compatible object store for file bytes.
type S3Config struct {
	// Endpoint is host[:port] of the S3 API, without a scheme. Required.
	Endpoint string
	// Bucket holds the files; it must exist. Required.
	Bucket string
	// Region of the bucket; empty lets the client discover it.
	Region string
	// AccessKeyID and SecretAccessKey sign requests; both empty reads the
	// standard AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY variables.
	AccessKeyID, SecretAccessKey string
	// Insecure talks plain HTTP instead of HTTPS (a store on loopback).
	Insecure bool
	// Prefix is put before every key, so one bucket can serve several
	// deployments. Default "files/".
	Prefix string
	// Transport replaces the HTTP transport (tests); nil is the default.
	Transport http.RoundTripper
}

// Validate checks the configuration and fills in defaults.
func (c *S3Config) Validate() error {
	if c.Endpoint == "" {
		return errors.New("files.s3.endpoint is required")
	}
	if strings.Contains(c.Endpoint, "://") {
		return errors.New("files.s3.endpoint is host[:port], without a scheme (set insecure for plain HTTP)")
	}
	if c.Bucket == "" {
		return errors.New("files.s3.bucket is required")
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return errors.New("files.s3: set both access_key_id and secret_access_key, or neither")
	}
	if c.Prefix == "" {
		c.Prefix = "files/"
	}
	return nil
}

// s3PartSize is the part size of a multipart upload of unknown length:
// the most one upload holds in memory beside its source.
const s3PartSize = 16 << 20

// S3FileStore keeps file bytes in an S3-compatible bucket.
type S3FileStore struct {
	c      *minio.Client
	bucket string
	prefix string
}

var _ FileStore = (*S3FileStore)(nil)

// NewS3FileStore returns a store over cfg's bucket. It does not call the
// store; Check does.
func NewS3FileStore(cfg S3Config) (*S3FileStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	creds := credentials.NewEnvAWS()
	if cfg.AccessKeyID != "" {
		creds = credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, "")
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{Creds: creds, Secure: !cfg.Insecure, Region: cfg.Region,
		Transport: cfg.Transport})
	if err != nil {
		return nil, fmt.Errorf("cannot create S3 client: %w", err)
	}
	return &S3FileStore{c: c, bucket: cfg.Bucket, prefix: cfg.Prefix}, nil
}

// Check reports whether the bucket exists and answers.
func (s *S3FileStore) Check(ctx context.Context) error {
	ok, err := s.c.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("cannot reach S3 bucket %s: %w", s.bucket, err)
	}
	if !ok {
		return fmt.Errorf("S3 bucket %s does not exist", s.bucket)
	}
	return nil
}

// sizedReader is a reader that knows how many bytes remain (bytes.Reader,
// strings.Reader).
type sizedReader interface {
	io.Reader
	Len() int
}

// Put implements FileStore. A reader that knows its length is sent as it
// is (a bytes.Reader is read in place, never copied); any other is read in
// parts of 16 MiB and stopped at the limit. A failed upload leaves
// nothing under key.
func (s *S3FileStore) Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, error) {
	size := int64(-1)
	if sr, ok := r.(sizedReader); ok {
		size = int64(sr.Len())
		if size > limit {
			return 0, ErrFileTooLarge
		}
	} else {
		r = &limitedReader{r: r, left: limit}
	}
	// Each part carries its Content-MD5, which the store checks, instead
	// of a SHA-256 signed into the request: a signed payload over plain
	// HTTP would use the aws-chunked encoding, which not every
	// S3-compatible store decodes.
	info, err := s.c.PutObject(ctx, s.bucket, s.prefix+key, r, size,
		minio.PutObjectOptions{ContentType: "application/octet-stream", PartSize: s3PartSize,
			SendContentMd5: true, DisableContentSha256: true})
	if err != nil {
		// A multipart upload that failed is aborted by the client; a
		// single PUT that failed stored nothing. Remove in case the
		// store kept a partial object anyway.
		_ = s.c.RemoveObject(context.WithoutCancel(ctx), s.bucket, s.prefix+key, minio.RemoveObjectOptions{})
		if errors.Is(err, ErrFileTooLarge) {
			return 0, ErrFileTooLarge
		}
		return 0, fmt.Errorf("cannot store file in S3: %w", err)
	}
	return info.Size, nil
}

// limitedReader fails with ErrFileTooLarge once more than left bytes are
// read.
type limitedReader struct {
	r    io.Reader
	left int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return 0, ErrFileTooLarge
	}
	return n, err
}

// Open implements FileStore.
func (s *S3FileStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := s.c.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("cannot open file in S3: %w", err)
	}
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("cannot open file in S3: %w", err)
	}
	return obj, nil
}

// Delete implements FileStore.
func (s *S3FileStore) Delete(ctx context.Context, key string) error {
	err := s.c.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return fmt.Errorf("cannot delete file in S3: %w", err)
	}
	return nil
}
