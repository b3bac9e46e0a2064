package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/edgegw/gateway/control"
	"github.com/edgegw/gateway/control/filetext"
	"github.com/edgegw/gateway/proxy"
	"github.com/edgegw/gateway/storage"
)

// filesFile is the config file's files section.
type filesFile struct {
	// MaxFileBytes is the largest upload, bytes. Default 64 MiB.
	MaxFileBytes int64 `yaml:"max_file_bytes"`
	// MaxFileTokens and MaxTurnTokens are chat's caps on attached text.
	MaxFileTokens int `yaml:"max_file_tokens"`
	MaxTurnTokens int `yaml:"max_turn_tokens"`
	// MaxImageBytes is the largest image sent to a tier that reads images.
	MaxImageBytes int64 `yaml:"max_image_bytes"`
	// ExtractTimeout bounds reading one document's text at upload.
	ExtractTimeout time.Duration `yaml:"extract_timeout"`
	// UploadReadTimeout replaces read-timeout for upload requests.
	UploadReadTimeout time.Duration `yaml:"upload_read_timeout"`
	// JanitorInterval is how often this process deletes the bytes of
	// deleted and expired files; 0 disables it here.
	JanitorInterval *time.Duration `yaml:"janitor_interval"`
	// S3, when set, keeps the bytes in an S3-compatible bucket instead of
	// PostgreSQL.
	S3 *s3File `yaml:"s3"`
}

// s3File configures the S3-compatible store. The secret key is read from
// the environment variable it names, never from the file.
type s3File struct {
	Endpoint           string `yaml:"endpoint"`
	Bucket             string `yaml:"bucket"`
	Region             string `yaml:"region"`
	AccessKeyID        string `yaml:"access_key_id"`
	SecretAccessKeyEnv string `yaml:"secret_access_key_env"`
	Insecure           bool   `yaml:"insecure"`
	Prefix             string `yaml:"prefix"`
}

// filesSettings is what the files section decides.
type filesSettings struct {
	API               control.FilesConfig
	MaxFileTokens     int
	MaxTurnTokens     int
	MaxImageBytes     int64
	UploadReadTimeout time.Duration
	JanitorInterval   time.Duration
	S3                *storage.S3Config
}

func loadFiles(f filesFile) (filesSettings, error) {
	s := filesSettings{API: control.FilesConfig{MaxFileBytes: f.MaxFileBytes,
		Text: filetext.Config{Timeout: f.ExtractTimeout}},
		MaxFileTokens: f.MaxFileTokens, MaxTurnTokens: f.MaxTurnTokens, MaxImageBytes: f.MaxImageBytes,
		UploadReadTimeout: f.UploadReadTimeout, JanitorInterval: control.DefaultFileJanitorEvery}
	switch {
	case f.MaxFileBytes < 0, f.MaxFileTokens < 0, f.MaxTurnTokens < 0, f.MaxImageBytes < 0, f.ExtractTimeout < 0,
		f.UploadReadTimeout < 0:
		return s, errors.New("config files: limits and timeouts must not be negative")
	}
	if err := s.API.Validate(); err != nil {
		return s, fmt.Errorf("config files: %w", err)
	}
	if s.MaxFileTokens == 0 {
		s.MaxFileTokens = proxy.DefaultMaxFileTokens
	}
	if s.MaxTurnTokens == 0 {
		s.MaxTurnTokens = proxy.DefaultMaxTurnTokens
	}
	if s.MaxFileTokens > s.API.Text.CountBound {
		return s, fmt.Errorf("config files.max_file_tokens: at most %d, the tokens counted at upload", s.API.Text.CountBound)
	}
	if s.UploadReadTimeout == 0 {
		s.UploadReadTimeout = 5 * time.Minute
	}
	if f.JanitorInterval != nil {
		if *f.JanitorInterval < 0 || *f.JanitorInterval > 15*time.Minute {
			return s, errors.New("config files.janitor_interval: from 0 (off here) to 15m, the bound on deleting a file's bytes")
		}
		s.JanitorInterval = *f.JanitorInterval
	}
	if f.S3 != nil {
		c := storage.S3Config{Endpoint: f.S3.Endpoint, Bucket: f.S3.Bucket, Region: f.S3.Region,
			AccessKeyID: f.S3.AccessKeyID, Insecure: f.S3.Insecure, Prefix: f.S3.Prefix}
		if f.S3.SecretAccessKeyEnv != "" {
			c.SecretAccessKey = os.Getenv(f.S3.SecretAccessKeyEnv)
			if c.SecretAccessKey == "" {
				return s, fmt.Errorf("config files.s3.secret_access_key_env: %s is not set", f.S3.SecretAccessKeyEnv)
			}
		}
		if err := c.Validate(); err != nil {
			return s, fmt.Errorf("config %w", err)
		}
		s.S3 = &c
	}
	return s, nil
}
