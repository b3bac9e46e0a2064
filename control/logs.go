package control

// registerLogs adds the request-log route.
func (a *API) registerLogs(r Registrar) {}
