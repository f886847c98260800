package cli

import (
	"errors"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// serviceError is err of the service, or of a team server's API (the
// same refusals, through the client), as the command line reports it: a
// refusal by its message alone (the API's code is for programs), a
// request refused as invalid as a usage error (exit status 2); anything
// else as it is.
func serviceError(err error) error {
	var se *service.Error
	var ae *api.Error
	code, msg := "", ""
	switch {
	case errors.As(err, &se):
		code, msg = se.Code, se.Message
	case errors.As(err, &ae):
		code, msg = ae.Code, ae.Message
	default:
		return err
	}
	if code == api.CodeInvalidRequest {
		return &usageError{errors.New(msg)}
	}
	return errors.New(msg)
}
