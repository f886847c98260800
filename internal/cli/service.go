package cli

import (
	"errors"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// serviceError is err of the service as the command line reports it: a
// refusal by its message alone (the API's code is for programs), a
// request refused as invalid as a usage error (exit status 2); anything
// else as it is.
func serviceError(err error) error {
	var se *service.Error
	switch {
	case !errors.As(err, &se):
		return err
	case se.Code == api.CodeInvalidRequest:
		return &usageError{errors.New(se.Message)}
	}
	return errors.New(se.Message)
}
