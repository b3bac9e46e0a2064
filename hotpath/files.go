package hotpath

import (
	"context"
	"errors"
)

// Text statuses of an uploaded file, as its record shows them.
const (
	FileTextReady   = "ready"    // the text was read at upload
	FileTextNotText = "not_text" // no text could be read; Reason says why
	FileTextImage   = "image"    // a JPEG, PNG or WebP image
)

// AttachedFile is what chat needs of one file a message names.
type AttachedFile struct {
	ID          string
	Filename    string
	ContentType string
	// Bytes is the stored size; Pages a PDF's page count (0 otherwise).
	Bytes int64
	Pages int
	// TextStatus is one of the FileText constants; Reason says why a
	// not_text file has no text.
	TextStatus string
	Reason     string
	// TextTokens counts Text with the product's tokenizer. A file whose
	// count stopped at the upload's counting bound has no Text and a
	// TextTokens above every per-file cap.
	TextTokens int
	Text       string
	// Data holds an image's bytes; nil for every other file.
	Data []byte
}

// ErrFileMissing is wrapped by a FileSource error naming an id that is
// not a readable file of the caller's: missing, malformed, another user's
// or organization's, deleted or expired.
var ErrFileMissing = errors.New("file not found")

// FileMissingError names the first id that is not the caller's readable
// file.
type FileMissingError struct{ ID string }

func (e *FileMissingError) Error() string { return "file " + e.ID + " not found" }

// Unwrap makes errors.Is(err, ErrFileMissing) hold.
func (e *FileMissingError) Unwrap() error { return ErrFileMissing }

// FileSource reads the files a chat request attaches. Chat calls it only
// for a request that names file ids.
type FileSource interface {
	// Attachments returns the files of ids, in the order of ids, owned by
	// userID in orgID and readable now (not deleted or expired), with
	// their text and, for images up to maxImageBytes, their bytes. An id
	// that is not such a file is a *FileMissingError.
	Attachments(ctx context.Context, orgID, userID string, ids []string, maxImageBytes int64) ([]AttachedFile, error)
}
