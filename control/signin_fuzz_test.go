package control

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/edgegw/gateway/codec"
)

const formType = "application/x-www-form-urlencoded"

// contentTypes are the encodings a sign-in body may arrive in.
var contentTypes = []string{"application/json", formType, formType + "; charset=utf-8", "", "text/plain"}

// requireOAuthError checks the shape every sign-in refusal has: a registry
// code, the OAuth code in error, and a description for people.
func requireOAuthError(t *testing.T, err error) {
	t.Helper()
	var cerr *codec.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("error %v is not a *codec.Error", err)
	}
	if !cerr.Code.Valid() || cerr.Message != cerr.Code.OAuthCode() || cerr.Detail.ErrorDescription == "" {
		t.Fatalf("error %+v is not an OAuth-style refusal", cerr)
	}
	if cerr.Code.Status() >= 500 {
		t.Fatalf("bad input answered %d", cerr.Code.Status())
	}
}

func jsonBody(t *testing.T, fields map[string]string) []byte {
	t.Helper()
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func formBody(fields map[string]string) []byte {
	v := url.Values{}
	for k, s := range fields {
		v.Set(k, s)
	}
	return []byte(v.Encode())
}

func FuzzSignInFields(f *testing.F) {
	f.Add(uint8(0), []byte(`{"device_code":"abc","grant_type":"x"}`))
	f.Add(uint8(1), []byte(`device_code=abc&grant_type=x&device_code=b`))
	f.Add(uint8(1), []byte(`a=%zz;b`))
	f.Add(uint8(0), []byte(`{"device_code":null,"x":[1,{"y":2}]}`))
	f.Add(uint8(3), []byte(`{"device_code":"\u0000\ud800"}`))
	f.Fuzz(func(t *testing.T, ct uint8, body []byte) {
		contentType := contentTypes[int(ct)%len(contentTypes)]
		got, err := signInFields(contentType, body, "device_code", "grant_type")
		if err != nil {
			requireOAuthError(t, err)
			return
		}
		for k := range got {
			if k != "device_code" && k != "grant_type" {
				t.Fatalf("field %q was not asked for", k)
			}
		}
		// Whatever was read survives both encodings unchanged.
		for _, enc := range []struct {
			ct   string
			body []byte
		}{{"application/json", jsonBody(t, got)}, {formType, formBody(got)}} {
			again, err := signInFields(enc.ct, enc.body, "device_code", "grant_type")
			if err != nil {
				t.Fatalf("re-encoded %q: %v", enc.body, err)
			}
			for k, v := range got {
				if again[k] != v && !(enc.ct == "application/json" && !validUTF8(v)) {
					t.Fatalf("field %s: %q became %q through %s", k, v, again[k], enc.ct)
				}
			}
		}
	})
}

func validUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func FuzzParseDeviceTokenRequest(f *testing.F) {
	f.Add(uint8(0), []byte(`{"device_code":"AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AbCde"}`))
	f.Add(uint8(1), []byte(`grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&device_code=abc`))
	f.Add(uint8(1), []byte(`grant_type=password&device_code=abc`))
	f.Add(uint8(0), []byte(`{}`))
	f.Fuzz(func(t *testing.T, ct uint8, body []byte) {
		req, err := parseDeviceTokenRequest(contentTypes[int(ct)%len(contentTypes)], body)
		if err != nil {
			requireOAuthError(t, err)
			return
		}
		if req.DeviceCode == "" {
			t.Fatal("a parsed request has a device code")
		}
		again, err := parseDeviceTokenRequest(formType, formBody(map[string]string{
			"device_code": req.DeviceCode, "grant_type": deviceGrantType}))
		if err != nil || again != req {
			t.Fatalf("form round trip: %+v, %v", again, err)
		}
	})
}

func FuzzParseOAuthStart(f *testing.F) {
	challenge := s256(strings.Repeat("v", 43))
	f.Add(uint8(0), []byte(`{"provider":"corp","code_challenge":"`+challenge+
		`","code_challenge_method":"S256","redirect_uri":"com.example.app:/cb"}`))
	f.Add(uint8(1), []byte(`provider=corp&code_challenge=`+challenge+
		`&code_challenge_method=S256&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb`))
	f.Add(uint8(0), []byte(`{"provider":"corp","code_challenge":"`+challenge+
		`","code_challenge_method":"S256","redirect_uri":"https://a.example/%zz#x"}`))
	f.Fuzz(func(t *testing.T, ct uint8, body []byte) {
		req, err := parseOAuthStart(contentTypes[int(ct)%len(contentTypes)], body)
		if err != nil {
			requireOAuthError(t, err)
			return
		}
		if req.Provider == "" || !validChallenge(req.CodeChallenge) {
			t.Fatalf("accepted %+v", req)
		}
		u, err := parseRedirectURI(req.RedirectURI)
		if err != nil || u.Scheme == "" || u.Fragment != "" {
			t.Fatalf("accepted redirect_uri %q", req.RedirectURI)
		}
		fields := map[string]string{"provider": req.Provider, "code_challenge": req.CodeChallenge,
			"code_challenge_method": "S256", "redirect_uri": req.RedirectURI}
		for _, enc := range [][2]string{{"application/json", string(jsonBody(t, fields))}, {formType, string(formBody(fields))}} {
			again, err := parseOAuthStart(enc[0], []byte(enc[1]))
			if err != nil || again != req {
				t.Fatalf("round trip through %s: %+v, %v", enc[0], again, err)
			}
		}
	})
}

func FuzzParseOAuthToken(f *testing.F) {
	v := strings.Repeat("a", 43)
	f.Add(uint8(0), []byte(`{"code":"c","code_verifier":"`+v+`","state":"s"}`))
	f.Add(uint8(1), []byte(`grant_type=authorization_code&code=c&code_verifier=`+v+`&state=s`))
	f.Add(uint8(1), []byte(`code=c&code=d&code_verifier=`+v+`&state=s`))
	f.Fuzz(func(t *testing.T, ct uint8, body []byte) {
		req, err := parseOAuthToken(contentTypes[int(ct)%len(contentTypes)], body)
		if err != nil {
			requireOAuthError(t, err)
			return
		}
		if req.Code == "" || req.State == "" {
			t.Fatalf("accepted %+v", req)
		}
		again, err := parseOAuthToken(formType, formBody(map[string]string{
			"code": req.Code, "code_verifier": req.CodeVerifier, "state": req.State}))
		if err != nil || again != req {
			t.Fatalf("form round trip: %+v, %v", again, err)
		}
	})
}

func FuzzParseApprovalForm(f *testing.F) {
	f.Add([]byte("csrf=x&user_code=bcdf-ghjk&org_id=o&decision=approve"))
	f.Add([]byte("csrf=x&user_code=BCDFGHJK&decision=deny"))
	f.Add([]byte("user_code=BCDF&decision=maybe"))
	f.Fuzz(func(t *testing.T, body []byte) {
		form, problem := parseApprovalForm(formType, body)
		if problem != "" {
			if form.UserCode != "" || form.Approve {
				t.Fatalf("an unusable form carried %+v", form)
			}
			return
		}
		if n, ok := normalizeUserCode(form.UserCode); !ok || n != form.UserCode {
			t.Fatalf("accepted user code %q", form.UserCode)
		}
		if form.Approve && form.OrgID == "" {
			t.Fatal("an approval names an organization")
		}
	})
}

func FuzzNormalizeUserCode(f *testing.F) {
	f.Add("BCDF-GHJK")
	f.Add("bcdf ghjk")
	f.Add("BCDF-GHJA")
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := normalizeUserCode(s)
		if !ok {
			if n != "" {
				t.Fatal("a refused code yields nothing")
			}
			return
		}
		if len(n) != userCodeLen || strings.Trim(n, userCodeAlphabet) != "" {
			t.Fatalf("normalized %q to %q", s, n)
		}
		again, ok := normalizeUserCode(formatUserCode(n))
		if !ok || again != n {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, n, again)
		}
	})
}
