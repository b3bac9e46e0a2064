package control

// registerSignIn adds the device-login and native OAuth routes.
func (a *API) registerSignIn(r Registrar) {}
