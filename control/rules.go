package control

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/pii"
	"github.com/edgegw/gateway/storage"
)

// ErrRulesForbidden refuses a ruleset change by a caller who is not an
// owner or admin of the organization, at either scope.
var ErrRulesForbidden = codec.NewError(codec.CodeRulesForbidden,
	"Only an owner or admin of the organization may change standing rules.")

// rulesMaxElements bounds how many elements a rules body may send before
// the database's cap of 50 is applied (so a huge array is refused before
// any work on it).
const rulesMaxElements = 1000

func (a *API) registerRules(r Registrar) {
	access := func(name string) hotpath.Access {
		return hotpath.Access{Name: name, Auth: hotpath.AuthUser, Family: hotpath.FamilyRules}
	}
	fromQuery := func(ctx *fasthttp.RequestCtx) (string, bool) {
		args := ctx.QueryArgs()
		return string(args.Peek("vault_id")), args.Has("vault_id")
	}
	fromPath := func(ctx *fasthttp.RequestCtx) (string, bool) { return pathParam(ctx, "id"), true }
	for _, s := range []struct {
		path  string
		scope func(*fasthttp.RequestCtx) (string, bool)
	}{{"/api/v1/rules", fromQuery}, {"/api/v1/vaults/{id}/rules", fromPath}} {
		r.Handle(fasthttp.MethodGet, s.path, access("rules_read"), a.readRules(s.scope))
		r.Handle(fasthttp.MethodPut, s.path, access("rules_replace"), a.replaceRules(s.scope))
		r.Handle(fasthttp.MethodDelete, s.path, access("rules_delete"), a.deleteRules(s.scope))
	}
	r.Handle(fasthttp.MethodGet, "/api/v1/rules/resolved", access("rules_resolved"), a.resolvedRules)
}

// rulesVaultID turns the scope selector into a vault id: "" selects the
// organization; a vault_id sent empty selects no vault at all (404).
func rulesVaultID(id string, given bool) (string, error) {
	if given && id == "" {
		return "", ErrVaultNotFound
	}
	return id, nil
}

func rulesError(err error) error {
	var capErr *storage.RulesCapError
	switch {
	case errors.As(err, &capErr):
		return &codec.Error{Code: codec.CodeRulesTooLarge,
			Message: "rules: the " + capErr.Bound + " cap of " + strconv.FormatInt(capErr.Limit, 10) + " is exceeded; nothing was stored.",
			Detail:  codec.Detail{Bound: capErr.Bound, Limit: capErr.Limit, HasLimit: true}}
	case errors.Is(err, storage.ErrForbidden):
		return ErrRulesForbidden
	case errors.Is(err, storage.ErrVaultNotFound):
		return ErrVaultNotFound
	}
	return storageError(err, ErrVaultNotFound)
}

// managesRules is the authority check, resolved before the vault id.
func managesRules(c *hotpath.Call) error {
	if r := c.User.Role; r != hotpath.RoleOwner && r != hotpath.RoleAdmin {
		return ErrRulesForbidden
	}
	return nil
}

func (a *API) readRules(scope func(*fasthttp.RequestCtx) (string, bool)) func(*fasthttp.RequestCtx, *hotpath.Call) error {
	return func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		vault, err := rulesVaultID(scope(ctx))
		if err != nil {
			return err
		}
		qctx, cancel := queryContext()
		defer cancel()
		rs, err := a.DB.GetRuleset(qctx, c.User.OrgID, c.User.UserID, vault)
		if err != nil {
			return rulesError(err)
		}
		return writeJSON(ctx, fasthttp.StatusOK, rs)
	}
}

// parseRules reads the rules array: each rule trimmed of surrounding
// whitespace; an empty one, or one carrying personal data, is refused
// naming its position and never echoing it.
func parseRules(raw json.RawMessage) ([]string, *codec.Error) {
	var elems []json.RawMessage
	if err := sonic.Unmarshal(raw, &elems); err != nil || elems == nil {
		return nil, convInvalid("rules: must be an array of strings.")
	}
	if len(elems) > rulesMaxElements {
		return nil, &codec.Error{Code: codec.CodeRulesTooLarge, Message: "rules: at most 50 rules; nothing was stored.",
			Detail: codec.Detail{Bound: "rules", Limit: 50, HasLimit: true}}
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		var s string
		if err := sonic.Unmarshal(e, &s); err != nil {
			return nil, convInvalid("rules[" + strconv.Itoa(i) + "]: must be a string.")
		}
		// All Unicode white space, a superset of the " \t\r\n" that the
		// gw_rules_trimmed constraint checks, so a trimmed rule satisfies it.
		s = strings.TrimSpace(s)
		if s == "" {
			return nil, convInvalid("rules[" + strconv.Itoa(i) + "]: empty after trimming; every rule needs text.")
		}
		if strings.IndexByte(s, 0) >= 0 {
			return nil, convInvalid("rules[" + strconv.Itoa(i) + "]: must not contain NUL characters.")
		}
		if cat, _, found := pii.Find(s); found {
			return nil, &codec.Error{Code: codec.CodePIIRejected,
				Message: "rules[" + strconv.Itoa(i) + "]: carries " + piiNoun(cat) + "; nothing was stored.",
				Detail:  codec.Detail{Category: string(cat), Position: int64(i), HasPosition: true}}
		}
		out[i] = s
	}
	return out, nil
}

func piiNoun(c pii.Category) string {
	switch c {
	case pii.Email:
		return "an e-mail address"
	case pii.Phone:
		return "a phone number"
	}
	return "a card number"
}

func (a *API) replaceRules(scope func(*fasthttp.RequestCtx) (string, bool)) func(*fasthttp.RequestCtx, *hotpath.Call) error {
	return func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		if err := managesRules(c); err != nil {
			return err
		}
		if err := writable(c); err != nil {
			return err
		}
		id, given := scope(ctx)
		f, cerr := parseConvFields(ctx.PostBody())
		if cerr != nil {
			return cerr
		}
		var rules []string
		if f.present("rules") {
			if rules, cerr = parseRules(f["rules"]); cerr != nil {
				return cerr
			}
		}
		var inherit *bool
		if f.present("inherit_org_rules") {
			if !given {
				return convInvalid("inherit_org_rules: only with a vault's ruleset (vault_id).")
			}
			if !f.given("inherit_org_rules") {
				return convInvalid("inherit_org_rules: must be true or false.")
			}
			b, cerr := f.boolean("inherit_org_rules")
			if cerr != nil {
				return cerr
			}
			inherit = &b
		}
		if rules == nil && inherit == nil {
			if given {
				return convInvalid("Send rules, inherit_org_rules or both.")
			}
			return convInvalid("rules: required, an array of strings ([] clears).")
		}
		vault, err := rulesVaultID(id, given)
		if err != nil {
			return err
		}
		qctx, cancel := queryContext()
		defer cancel()
		rs, err := a.DB.PutRuleset(qctx, c.User.OrgID, c.User.UserID, vault, rules, inherit)
		if err != nil {
			return rulesError(err)
		}
		return writeJSON(ctx, fasthttp.StatusOK, rs)
	}
}

func (a *API) deleteRules(scope func(*fasthttp.RequestCtx) (string, bool)) func(*fasthttp.RequestCtx, *hotpath.Call) error {
	return func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		if err := managesRules(c); err != nil {
			return err
		}
		if err := writable(c); err != nil {
			return err
		}
		vault, err := rulesVaultID(scope(ctx))
		if err != nil {
			return err
		}
		qctx, cancel := queryContext()
		defer cancel()
		if err := a.DB.DeleteRuleset(qctx, c.User.OrgID, c.User.UserID, vault); err != nil {
			return rulesError(err)
		}
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return nil
	}
}

func (a *API) resolvedRules(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	args := ctx.QueryArgs()
	vault, err := rulesVaultID(string(args.Peek("vault_id")), args.Has("vault_id"))
	if err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	rules, inherit, err := a.DB.ResolvedRules(qctx, c.User.OrgID, c.User.UserID, vault)
	if err != nil {
		return rulesError(err)
	}
	type rule struct {
		Text   string `json:"text"`
		Source string `json:"source"`
	}
	out := make([]rule, len(rules))
	for i, r := range rules {
		out[i] = rule{r.Text, r.Source}
	}
	body := map[string]any{"object": "ruleset.resolved", "vault_id": nil, "rules": out}
	if vault != "" {
		body["vault_id"] = vault
		body["inherit_org_rules"] = *inherit
	}
	return writeJSON(ctx, fasthttp.StatusOK, body)
}
