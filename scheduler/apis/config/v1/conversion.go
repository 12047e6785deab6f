package v1

import (
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/utils/ptr"

	"github.com/thinlvm/thinlvm/scheduler/apis/config"
)

// The capacity strategy is a plain string in v1 and a named one inside:
// conversion-gen leaves it to these two, which call the generated
// conversions for the rest.

// Convert_v1_ThinLVMArgs_To_config_ThinLVMArgs converts defaulted v1 args.
func Convert_v1_ThinLVMArgs_To_config_ThinLVMArgs(in *ThinLVMArgs, out *config.ThinLVMArgs, s conversion.Scope) error { //nolint:revive // conversion-gen's naming
	if err := autoConvert_v1_ThinLVMArgs_To_config_ThinLVMArgs(in, out, s); err != nil {
		return err
	}
	out.CapacityStrategy = config.CapacityStrategy(ptr.Deref(in.CapacityStrategy, ""))
	return nil
}

// Convert_config_ThinLVMArgs_To_v1_ThinLVMArgs converts internal args back.
func Convert_config_ThinLVMArgs_To_v1_ThinLVMArgs(in *config.ThinLVMArgs, out *ThinLVMArgs, s conversion.Scope) error { //nolint:revive // conversion-gen's naming
	if err := autoConvert_config_ThinLVMArgs_To_v1_ThinLVMArgs(in, out, s); err != nil {
		return err
	}
	out.CapacityStrategy = ptr.To(string(in.CapacityStrategy))
	return nil
}
