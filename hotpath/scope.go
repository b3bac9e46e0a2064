package hotpath

import (
	"fmt"
	"math/bits"
	"strings"
)

// Family is an endpoint family a key may be scoped to.
type Family uint8

// The endpoint families, in the order the spec lists them. FamilyNone marks a
// route that any valid key may call.
const (
	FamilyNone Family = iota
	FamilyChat
	FamilyTokens
	FamilyEmbeddings
	FamilyRerank
	FamilyModeration
	FamilyFiles
	FamilyMemory
	FamilyRules
	FamilyConversations
	FamilyVaults
	FamilyPrompts
	FamilyWorkspaces
	FamilyOrg
	FamilyEvals
	FamilyFeedback
	FamilyLogs
	FamilyLimits
	familyCount
)

var familyNames = [familyCount]string{
	"", "chat", "tokens", "embeddings", "rerank", "moderation", "files", "memory",
	"rules", "conversations", "vaults", "prompts", "workspaces", "org", "evals",
	"feedback", "logs", "limits",
}

// String returns the family's name as it appears in scopes.
func (f Family) String() string {
	if f >= familyCount {
		return "unknown"
	}
	return familyNames[f]
}

// FamilyNames returns every family name in canonical order.
func FamilyNames() []string {
	return append([]string(nil), familyNames[1:]...)
}

// Scopes is a set of families. The zero value is an unscoped key, which holds
// every family.
type Scopes uint32

const allScopes = Scopes(1<<familyCount-1) &^ 1

// ParseScopes turns family names into a set. An empty list is the unscoped
// set. Unknown names are an error naming the name.
func ParseScopes(names []string) (Scopes, error) {
	var s Scopes
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		f := lookupFamily(n)
		if f == FamilyNone {
			return 0, fmt.Errorf("unknown scope %q (known: %s)", n, strings.Join(FamilyNames(), ", "))
		}
		s |= 1 << f
	}
	return s, nil
}

func lookupFamily(name string) Family {
	for f := FamilyChat; f < familyCount; f++ {
		if familyNames[f] == name {
			return f
		}
	}
	return FamilyNone
}

// Has reports whether the set grants f. FamilyNone is always granted, and so
// is every family on an unscoped set.
func (s Scopes) Has(f Family) bool {
	return f == FamilyNone || s == 0 || s&(1<<f) != 0
}

// Lacking returns the first family s grants that held does not, or
// FamilyNone when held grants all of s.
func (s Scopes) Lacking(held Scopes) Family {
	for f := FamilyChat; f < familyCount; f++ {
		if s.Has(f) && !held.Has(f) {
			return f
		}
	}
	return FamilyNone
}

// Names returns the effective family names: every family for an unscoped
// set, so the list is never empty.
func (s Scopes) Names() []string {
	if s == 0 {
		s = allScopes
	}
	out := make([]string, 0, bits.OnesCount32(uint32(s)))
	for f := FamilyChat; f < familyCount; f++ {
		if s&(1<<f) != 0 {
			out = append(out, familyNames[f])
		}
	}
	return out
}

// Stored returns the names as they are stored: nil for an unscoped set.
func (s Scopes) Stored() []string {
	if s == 0 {
		return []string{}
	}
	return s.Names()
}
