package bus

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/gin-gonic/gin"

	config "github.com/storybus/storybus/api/config/v1alpha1"
)

// IAMService is the service that signatures on the iam routes are scoped
// to, as for API Gateway.
const IAMService = "execute-api"

// SignatureWindow is how far the X-Amz-Date of a signed request may be from
// the bus's clock, either way, as on API Gateway.
const SignatureWindow = 5 * time.Minute

const (
	sigV4Algorithm = "AWS4-HMAC-SHA256"
	amzDateHeader  = "X-Amz-Date"
	amzDateLayout  = "20060102T150405Z"
)

// The x-amzn-ErrorType of API Gateway's answers, sent with them; the
// metrics count them under these names in place of a rule.
const (
	awsMissingToken        = "MissingAuthenticationTokenException"
	awsIncompleteSignature = "IncompleteSignatureException"
	awsInvalidSignature    = "InvalidSignatureException"
	awsUnrecognizedClient  = "UnrecognizedClientException"
)

// The fixed wording of API Gateway's answers.
const (
	msgSignatureMismatch = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
	msgInvalidToken      = "The security token included in the request is invalid."
)

// awsDenial is a refusal of stage 3 on the iam routes, answered in API
// Gateway's shape and words: 403 {"message":"…"}.
type awsDenial struct {
	errorType string
	message   string
}

func (d *awsDenial) write(c *gin.Context) {
	c.Header("x-amzn-ErrorType", d.errorType)
	c.Set(ctxRule, d.errorType)
	writeJSON(c, http.StatusForbidden, AWSMessage{Message: d.message})
}

// publishIAM handles POST /v1/tenants/{t}/iam/messages: the publish
// pipeline, authenticated by an AWS Signature Version 4.
func (s *Server) publishIAM(c *gin.Context) { s.publishWith(c, s.pipelines.publishIAM) }

// authenticateIAM is stage 3 of the iam routes: a Signature Version 4 in
// the Authorization header, by an access key bound to one of the
// workspace's connections. Stage 4 then refuses the connection while its
// IAM role is not verified.
func (s *Server) authenticateIAM(r *request) outcome {
	r.iam = true
	conn, denial := verifySigV4(r.c.Request.Context(), r.c.Request, r.body, r.cfg, s.opts.Clock.Now())
	if denial != nil {
		denial.write(r.c)
		return outcome{answered: true}
	}
	r.conn = conn
	return outcome{}
}

// sigV4Auth is the Authorization header of a signed request.
type sigV4Auth struct {
	accessKeyID, region, service string
	signedHeaders                []string
	signature                    string
}

// verifySigV4 returns the connection whose access key signed req, checking
// the signature by computing it again over req and body with the
// connection's secret, or API Gateway's answer when it cannot.
func verifySigV4(ctx context.Context, req *http.Request, body []byte, cfg *config.Workspace, now time.Time) (*config.Connection, *awsDenial) {
	header := strings.TrimSpace(req.Header.Get("Authorization"))
	if header == "" {
		return nil, &awsDenial{awsMissingToken, MissingAuthenticationToken}
	}
	auth, denial := parseSigV4(header, req.Header.Get(amzDateHeader) != "")
	if denial != nil {
		return nil, denial
	}
	signedAt, err := time.Parse(amzDateLayout, req.Header.Get(amzDateHeader))
	if err != nil {
		return nil, &awsDenial{awsInvalidSignature, msgSignatureMismatch}
	}
	if denial := checkSkew(signedAt, now); denial != nil {
		return nil, denial
	}
	conn, ok := connectionByAccessKey(cfg, auth.accessKeyID)
	if !ok {
		return nil, &awsDenial{awsUnrecognizedClient, msgInvalidToken}
	}
	want, err := expectedSignature(ctx, req, body, auth, conn.IAM.SecretAccessKey, signedAt)
	if err != nil || subtle.ConstantTimeCompare([]byte(want), []byte(auth.signature)) != 1 {
		return nil, &awsDenial{awsInvalidSignature, msgSignatureMismatch}
	}
	return conn, nil
}

// parseSigV4 reads an Authorization header: the algorithm, then
// comma-separated key=value parameters.
func parseSigV4(header string, hasDate bool) (sigV4Auth, *awsDenial) {
	algorithm, rest, _ := strings.Cut(header, " ")
	params := map[string]string{}
	for _, p := range strings.Split(rest, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return sigV4Auth{}, &awsDenial{awsIncompleteSignature,
				fmt.Sprintf("'%s' not a valid key=value pair (missing equal-sign) in Authorization header: '%s'.", p, header)}
		}
		if _, seen := params[k]; !seen {
			params[k] = v
		}
	}
	var missing []string
	for _, name := range []string{"Credential", "Signature", "SignedHeaders"} {
		if params[name] == "" {
			missing = append(missing, "Authorization header requires '"+name+"' parameter.")
		}
	}
	if !hasDate {
		missing = append(missing, "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
	}
	if len(missing) > 0 {
		return sigV4Auth{}, &awsDenial{awsIncompleteSignature, strings.Join(missing, " ") + " Authorization=" + header}
	}
	credential := params["Credential"]
	scope := strings.Split(credential, "/")
	if len(scope) != 5 {
		return sigV4Auth{}, &awsDenial{awsIncompleteSignature,
			fmt.Sprintf("Credential must have exactly 5 slash-delimited elements, e.g. keyid/date/region/service/term, got '%s'", credential)}
	}
	if scope[3] != IAMService {
		return sigV4Auth{}, &awsDenial{awsInvalidSignature, "Credential should be scoped to correct service: '" + IAMService + "'. "}
	}
	if algorithm != sigV4Algorithm {
		// Nothing else can be checked: no signature of another
		// algorithm matches the one the bus computes.
		return sigV4Auth{}, &awsDenial{awsInvalidSignature, msgSignatureMismatch}
	}
	return sigV4Auth{
		accessKeyID:   scope[0],
		region:        scope[2],
		service:       scope[3],
		signedHeaders: strings.Split(strings.ToLower(params["SignedHeaders"]), ";"),
		signature:     params["Signature"],
	}, nil
}

// checkSkew refuses a signature dated more than SignatureWindow from now.
func checkSkew(signedAt, now time.Time) *awsDenial {
	now = now.UTC()
	minutes := int(SignatureWindow / time.Minute)
	switch {
	case now.Sub(signedAt) > SignatureWindow:
		return &awsDenial{awsInvalidSignature, fmt.Sprintf("Signature expired: %s is now earlier than %s (%s - %d min.)",
			signedAt.Format(amzDateLayout), now.Add(-SignatureWindow).Format(amzDateLayout), now.Format(amzDateLayout), minutes)}
	case signedAt.Sub(now) > SignatureWindow:
		return &awsDenial{awsInvalidSignature, fmt.Sprintf("Signature not yet current: %s is still later than %s (%s + %d min.)",
			signedAt.Format(amzDateLayout), now.Add(SignatureWindow).Format(amzDateLayout), now.Format(amzDateLayout), minutes)}
	}
	return nil
}

// connectionByAccessKey returns the connection the access key is bound to.
// A key without a secret authenticates nothing: an empty secret would let
// anyone sign.
func connectionByAccessKey(cfg *config.Workspace, accessKeyID string) (*config.Connection, bool) {
	if accessKeyID == "" {
		return nil, false
	}
	for i := range cfg.Connections {
		c := &cfg.Connections[i]
		if c.IAM != nil && c.IAM.AccessKeyID == accessKeyID && c.IAM.SecretAccessKey != "" {
			return c, true
		}
	}
	return nil, false
}

// expectedSignature signs, with the AWS SDK's signer, a copy of req made
// of what the client says it signed (the method, path, query, the headers
// named in SignedHeaders) and the SHA-256 of the body, at the client's
// X-Amz-Date, in the region of its credential scope: the signature the
// client must have sent.
func expectedSignature(ctx context.Context, req *http.Request, body []byte, auth sigV4Auth, secret string, signedAt time.Time) (string, error) {
	scheme := "http"
	if req.TLS != nil {
		scheme = "https"
	}
	cp := &http.Request{
		Method: req.Method,
		URL: &url.URL{Scheme: scheme, Host: req.Host, Path: req.URL.Path, RawPath: req.URL.RawPath,
			RawQuery: req.URL.RawQuery},
		Host:   req.Host,
		Header: http.Header{},
	}
	for _, name := range auth.signedHeaders {
		switch name {
		case "host": // always signed, from cp.Host
		case "content-length": // signed when cp.ContentLength > 0
			cp.ContentLength = req.ContentLength
		default:
			key := textproto.CanonicalMIMEHeaderKey(name)
			if v, ok := req.Header[key]; ok {
				cp.Header[key] = v
			}
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: auth.accessKeyID, SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(ctx, creds, cp, hex.EncodeToString(sum[:]), auth.service, auth.region, signedAt); err != nil {
		return "", err
	}
	_, params, _ := strings.Cut(cp.Header.Get("Authorization"), " ")
	for _, p := range strings.Split(params, ",") {
		if sig, ok := strings.CutPrefix(strings.TrimSpace(p), "Signature="); ok {
			return sig, nil
		}
	}
	return "", fmt.Errorf("the signer produced no signature")
}
