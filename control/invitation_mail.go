package control

import (
	htmltemplate "html/template"
	"net/url"
	"strings"
	texttemplate "text/template"

	"github.com/edgegw/gateway/storage"
)

// Waker is told when a message was written to the outbox, so delivery does
// not wait for the next poll.
type Waker interface {
	Wake()
}

// MailConfig is what the invitation messages need.
type MailConfig struct {
	// PublicBaseURL is the product's public address; the accept link is
	// {PublicBaseURL}/invitations/{id}. Default http://localhost:8080.
	PublicBaseURL string
}

var invitationText = texttemplate.Must(texttemplate.New("text").Parse(
	`{{.Inviter}} invited you to join {{.Org}} as {{.Role}}.

Accept the invitation:
{{.Link}}

The invitation can be accepted until {{.Expires}}. If you did not expect it,
ignore this message: nothing happens unless you accept.
`))

var invitationHTML = htmltemplate.Must(htmltemplate.New("html").Parse(`<!doctype html>
<html><body>
<p>{{.Inviter}} invited you to join <strong>{{.Org}}</strong> as {{.Role}}.</p>
<p><a href="{{.Link}}">Accept the invitation</a></p>
<p>The invitation can be accepted until {{.Expires}}. If you did not expect it,
ignore this message: nothing happens unless you accept.</p>
</body></html>
`))

// composeInvitation writes the invitation message: a text and an HTML body
// naming the organization and the inviter, with the accept link. The HTML
// template escapes the organization's name and the inviter's address.
func (a *API) composeInvitation(f storage.MailFacts) storage.Mail {
	base := strings.TrimRight(a.Mail.PublicBaseURL, "/")
	if base == "" {
		base = "http://localhost:8080"
	}
	data := struct{ Inviter, Org, Role, Link, Expires string }{
		Inviter: f.InviterEmail, Org: f.OrgName, Role: string(f.Role),
		Link:    base + "/invitations/" + url.PathEscape(f.InvitationID),
		Expires: f.ExpiresAt.UTC().Format("2 January 2006 15:04 UTC"),
	}
	var text, html strings.Builder
	// The templates are fixed and their data are strings: they cannot fail.
	_ = invitationText.Execute(&text, data)
	_ = invitationHTML.Execute(&html, data)
	return storage.Mail{
		Subject: f.InviterEmail + " invited you to join " + f.OrgName,
		Text:    text.String(), HTML: html.String(),
	}
}
