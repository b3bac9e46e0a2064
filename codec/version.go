package codec

// Version is a Gateway-Version date packed as the decimal number yyyymmdd,
// so that versions compare in date order with the usual operators.
type Version uint32

// Known versions.
const (
	// VersionMemoryPin introduced memory pins.
	VersionMemoryPin Version = 20260926
	// VersionChatFileIDs introduced file ids in chat requests.
	VersionChatFileIDs Version = 20261005
	// VersionMessageFileIDs introduced file ids on individual messages.
	VersionMessageFileIDs Version = 20261006
	// VersionFileExpiresIn introduced expires_in on uploaded files.
	VersionFileExpiresIn Version = 20261007

	// CurrentVersion is the newest version the gateway speaks.
	CurrentVersion Version = 20261007
)

// ParseVersion parses a Gateway-Version value. It accepts exactly YYYY-MM-DD:
// ten bytes, ASCII digits and two hyphens, naming a real calendar date with
// a year from 2000 to 9999. Nothing else is accepted: no surrounding spaces,
// no signs, no trailing bytes.
func ParseVersion(b []byte) (Version, bool) {
	if len(b) != 10 || b[4] != '-' || b[7] != '-' {
		return 0, false
	}
	y, ok1 := digits(b[0:4])
	m, ok2 := digits(b[5:7])
	d, ok3 := digits(b[8:10])
	if !ok1 || !ok2 || !ok3 || y < 2000 || m < 1 || m > 12 || d < 1 || d > daysIn(m, y) {
		return 0, false
	}
	return Version(y*10000 + m*100 + d), true
}

// Year returns v's year.
func (v Version) Year() int { return int(v / 10000) }

// Month returns v's month, 1 to 12 for a valid version.
func (v Version) Month() int { return int(v / 100 % 100) }

// Day returns v's day of the month.
func (v Version) Day() int { return int(v % 100) }

// Valid reports whether v is a date that ParseVersion would accept.
func (v Version) Valid() bool {
	y, m, d := uint32(v.Year()), uint32(v.Month()), uint32(v.Day())
	return y >= 2000 && y <= 9999 && m >= 1 && m <= 12 && d >= 1 && d <= daysIn(m, y)
}

// AppendTo appends v to dst as YYYY-MM-DD. For a valid v the output parses
// back to v. Fields of an invalid v are written modulo their width.
func (v Version) AppendTo(dst []byte) []byte {
	y, m, d := uint32(v/10000), uint32(v/100%100), uint32(v%100)
	return append(dst,
		byte('0'+y/1000%10), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10), '-',
		byte('0'+m/10), byte('0'+m%10), '-',
		byte('0'+d/10), byte('0'+d%10))
}

// String returns v as YYYY-MM-DD.
func (v Version) String() string {
	var buf [10]byte
	return string(v.AppendTo(buf[:0]))
}

// digits parses b as an unsigned decimal made only of ASCII digits.
func digits(b []byte) (uint32, bool) {
	var n uint32
	for _, c := range b {
		c -= '0'
		if c > 9 {
			return 0, false
		}
		n = n*10 + uint32(c)
	}
	return n, true
}

// daysIn returns the number of days in month m of year y.
func daysIn(m, y uint32) uint32 {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
