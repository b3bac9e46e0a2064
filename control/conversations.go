package control

// registerConversations adds the conversation routes.
func (a *API) registerConversations(r Registrar) {}
