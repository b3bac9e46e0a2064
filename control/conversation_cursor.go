package control

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"
	"time"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/storage"
)

// Cursors are opaque to clients: base64url (unpadded) of a version byte, a
// kind byte and the kind's fields. A list cursor carries the last
// conversation's updated_at (Unix microseconds) and id, and a hash of the
// filters it was issued under; a message cursor carries the order it was
// issued for, the leaf of the path being paged and the last sequence
// returned. A cursor used with other filters or another order is refused.
const (
	convCursorVersion = 1
	convCursorList    = 'l'
	convCursorMessage = 'm'
	convCursorAsc     = 'a'
	convCursorDesc    = 'd'
)

var (
	errConvCursor             = convInvalid("cursor: not a cursor this route issued.")
	errConvCursorFilters      = convInvalid("cursor: was issued for other filters; send the filters of the first page with it.")
	errConvMessageCursor      = convInvalid("message_cursor: not a cursor this route issued.")
	errConvMessageCursorOrder = convInvalid("message_cursor: was issued for the other message_order; send it with the order it was issued for.")
)

// convListCursor is a position in the conversation list.
type convListCursor struct {
	filters   uint64
	updatedAt time.Time
	id        string
}

// convListFilterHash fingerprints the filters a list cursor is bound to.
func convListFilterHash(source string, archived bool, vaultID *string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(source))
	if archived {
		_, _ = h.Write([]byte{1})
	} else {
		_, _ = h.Write([]byte{0})
	}
	if vaultID != nil {
		_, _ = h.Write([]byte(*vaultID))
	}
	return h.Sum64()
}

func (c convListCursor) encode() string {
	b := []byte{convCursorVersion, convCursorList}
	b = binary.BigEndian.AppendUint64(b, c.filters)
	b = binary.AppendVarint(b, c.updatedAt.UnixMicro())
	b = append(b, c.id...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeConvListCursor(s string, filters uint64) (convListCursor, *codec.Error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2+8+1 || b[0] != convCursorVersion || b[1] != convCursorList {
		return convListCursor{}, errConvCursor
	}
	c := convListCursor{filters: binary.BigEndian.Uint64(b[2:10])}
	micros, n := binary.Varint(b[10:])
	if n <= 0 {
		return convListCursor{}, errConvCursor
	}
	var ok bool
	if c.updatedAt, ok = storage.CursorTime(micros); !ok {
		return convListCursor{}, errConvCursor
	}
	c.id = string(b[10+n:])
	if !storage.CanonUUID(&c.id) {
		return convListCursor{}, errConvCursor
	}
	if c.filters != filters {
		return convListCursor{}, errConvCursorFilters
	}
	return c, nil
}

// convMessageCursor is a position in one path of a conversation.
type convMessageCursor struct {
	desc  bool
	leaf  string
	after int
}

func (c convMessageCursor) encode() string {
	order := byte(convCursorAsc)
	if c.desc {
		order = convCursorDesc
	}
	b := []byte{convCursorVersion, convCursorMessage, order}
	b = binary.AppendUvarint(b, uint64(c.after))
	b = append(b, c.leaf...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeConvMessageCursor(s string, desc bool) (convMessageCursor, *codec.Error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 4 || b[0] != convCursorVersion || b[1] != convCursorMessage ||
		(b[2] != convCursorAsc && b[2] != convCursorDesc) {
		return convMessageCursor{}, errConvMessageCursor
	}
	c := convMessageCursor{desc: b[2] == convCursorDesc}
	after, n := binary.Uvarint(b[3:])
	if n <= 0 || after < 1 || after > 1<<31-1 {
		return convMessageCursor{}, errConvMessageCursor
	}
	c.after = int(after)
	c.leaf = string(b[3+n:])
	if !storage.CanonUUID(&c.leaf) {
		return convMessageCursor{}, errConvMessageCursor
	}
	if c.desc != desc {
		return convMessageCursor{}, errConvMessageCursorOrder
	}
	return c, nil
}
