package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// options are the flags every command shares: kubectl's connection flags
// (--kubeconfig, --context, -n, ...) and -o.
type options struct {
	config  *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	output  string
}

func newRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{config: genericclioptions.NewConfigFlags(true), streams: streams}
	root := &cobra.Command{
		Use:           "kubectl-thinlvm",
		Short:         "thinlvm's node-local volumes: capacity per node, volumes and their origins, golden images; moves between nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	o.config.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVarP(&o.output, "output", "o", "", "Output format: wide, json or yaml (a table when empty).")
	root.AddCommand(newNodesCommand(o), newVolumesCommand(o), newImagesCommand(o), newMoveCommand(o), newEvacuateCommand(o), newAdoptCommand(o))
	return root
}

// client is a client of the cluster the flags name, with thinlvm's types.
func (o *options) client() (client.Client, error) {
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := thinlvmv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// namespace is the namespace of -n or of the kubeconfig's context.
func (o *options) namespace() (string, error) {
	ns, _, err := o.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the kubeconfig's namespace: %w", err)
	}
	return ns, nil
}

// report is what a command prints: rows for its table, the same as items
// for json and yaml.
type report[T any] struct {
	columns []metav1.TableColumnDefinition
	row     func(T) []any
	items   []T
	// warnings are printed after a table, on standard error (with json or
	// yaml they are in the items).
	warnings []string
}

// show writes r as -o asks.
func show[T any](o *options, r report[T]) error {
	if r.items == nil {
		r.items = []T{} // "items": [], not null
	}
	switch o.output {
	case "json":
		return writeJSON(o.streams.Out, r.items)
	case "yaml":
		b, err := yaml.Marshal(itemList[T]{Items: r.items})
		if err != nil {
			return err
		}
		_, err = o.streams.Out.Write(b)
		return err
	case "", "wide":
		table := &metav1.Table{ColumnDefinitions: r.columns}
		for _, it := range r.items {
			table.Rows = append(table.Rows, metav1.TableRow{Cells: r.row(it)})
		}
		if len(table.Rows) == 0 {
			_, err := fmt.Fprintln(o.streams.ErrOut, "No resources found.")
			return err
		}
		if err := printers.NewTablePrinter(printers.PrintOptions{Wide: o.output == "wide"}).PrintObj(table, o.streams.Out); err != nil {
			return err
		}
		for _, w := range r.warnings {
			fmt.Fprintln(o.streams.ErrOut, "Warning:", w)
		}
		return nil
	default:
		return fmt.Errorf("unknown output format %q: want wide, json or yaml", o.output)
	}
}

// itemList is a report's items as json and yaml show them.
type itemList[T any] struct {
	Items []T `json:"items"`
}

func writeJSON[T any](w io.Writer, items []T) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "    ")
	return enc.Encode(itemList[T]{Items: items})
}

// column is a table column; wide ones show with -o wide only.
func column(name, description string, wide bool) metav1.TableColumnDefinition {
	c := metav1.TableColumnDefinition{Name: name, Type: "string", Description: description}
	if wide {
		c.Priority = 1
	}
	return c
}
