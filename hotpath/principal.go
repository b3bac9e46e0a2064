package hotpath

import "fmt"

// KeyKind is the kind of a user key.
type KeyKind uint8

// The three kinds of user key.
const (
	KindDeveloper KeyKind = iota + 1
	KindSignedIn
	KindHeadless
)

var keyKindNames = [...]string{"", "developer", "signed_in", "headless"}

// String returns the kind as stored and shown.
func (k KeyKind) String() string {
	if int(k) >= len(keyKindNames) {
		return ""
	}
	return keyKindNames[k]
}

// ParseKeyKind parses developer, signed_in or headless.
func ParseKeyKind(s string) (KeyKind, error) {
	for k := KindDeveloper; int(k) < len(keyKindNames); k++ {
		if keyKindNames[k] == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown key kind %q (known: developer, signed_in, headless)", s)
}

// Bucket is what GET /api/v1/limits reports for the kind.
func (k KeyKind) Bucket() string {
	switch k {
	case KindSignedIn:
		return "subscription"
	case KindHeadless:
		return "headless"
	default:
		return "apikey"
	}
}

// Role is a member's authority in an organization.
type Role string

// The three roles.
const (
	RoleOwner  Role = "owner"
	RoleAdmin  Role = "admin"
	RoleMember Role = "member"
)

// ParseRole parses owner, admin or member.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleOwner, RoleAdmin, RoleMember:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q (known: owner, admin, member)", s)
}

// Principal is a verified user key: everything a request needs to know about
// its caller. Values are shared between requests and must not be modified.
type Principal struct {
	KeyID    string
	UserID   string
	OrgID    string
	OrgName  string
	Role     Role
	Kind     KeyKind
	Scopes   Scopes
	Models   []string // tier allowlist; empty allows every tier
	ReadOnly bool
	// SpendCapMicros is the monthly spend cap in micro-USD; -1 means none.
	SpendCapMicros int64
	// CreditsMicros is the prepaid credit of a headless key in micro-USD; -1 means none.
	CreditsMicros int64
	// CreditsAdjustMicros is an operator's adjustment to the granted
	// credit, in micro-USD (may be negative).
	CreditsAdjustMicros int64
	WorkspaceID         string // the key's workspace: its organization's default when the key names none
	// WorkspaceCapMicros is the key's workspace's monthly spend cap in
	// micro-USD; -1 means none.
	WorkspaceCapMicros int64
	// PlanName names the organization's subscription plan; empty selects the
	// default plan.
	PlanName string
	// ExpiresAt is the Unix time in seconds when the key stops working; 0 never.
	ExpiresAt int64
	// Revoked and Suspended are kept so that a refused key is answered from
	// the cache too: revocation is final, and suspension changes notify.
	Revoked   bool
	Suspended bool

	// counterKeys names the key's windows and lease in the counter store;
	// the verifier builds them once per cached record, not per request.
	counterKeys CounterKeys
}

// CounterKeys names a key's request windows and concurrency lease in the
// counter store (hotpath/meter).
type CounterKeys struct{ Key, Org, Tokens, Lease string }

// prepare builds what requests derive from the record. The verifier calls it
// before the record is shared.
func (p *Principal) prepare() { p.counterKeys = p.buildCounterKeys() }

func (p *Principal) buildCounterKeys() CounterKeys {
	return CounterKeys{Key: "rl:k:" + p.KeyID, Org: "rl:o:" + p.OrgID, Tokens: "rl:t:" + p.KeyID, Lease: "cc:" + p.KeyID}
}

// CounterKeys returns the counter names, building them when the record did
// not come through the verifier.
func (p *Principal) CounterKeys() CounterKeys {
	if p.counterKeys.Key != "" {
		return p.counterKeys
	}
	return p.buildCounterKeys()
}

// CreditsCapMicros is a headless key's whole credit: granted plus
// adjustment, never below zero.
func (p *Principal) CreditsCapMicros() int64 {
	return max(max(p.CreditsMicros, 0)+p.CreditsAdjustMicros, 0)
}

// AllowsModel reports whether the key's allowlist admits the tier.
func (p *Principal) AllowsModel(tier string) bool {
	if len(p.Models) == 0 {
		return true
	}
	for _, m := range p.Models {
		if m == tier {
			return true
		}
	}
	return false
}

// ServiceToken is a verified gw_svc_ token.
type ServiceToken struct {
	ID       string
	Name     string
	Scopes   Scopes
	ReadOnly bool
	// ExpiresAt is the Unix time in seconds when the token stops working; 0 never.
	ExpiresAt int64
	Revoked   bool
}
